"""Compile-ahead must spare the GPU worker its compile: the CPU side computes the same Triton cache key as
the GPU's own launch, so the first launch loads the cubin from the shared cache instead of compiling.

Run on the GPU machine:  python -m pytest tests/gpu/test_compile_cache.py -q
"""

import os

import numpy as np
import pytest

import operators
from evo.evaluate import CompileChild, GpuBackend, make_candidate, pipeline
from evo.evaluate.worker import GpuWorker
from evo.experiment.spec import EvaluationSpec
from tests.fixtures.faulty_operator import candidate

pytestmark = pytest.mark.gpu


def entries(cache_dir):
    """Cache entries holding a compiled kernel (a cubin). Loading a kernel also caches Triton's C launcher
    stub for its signature (a shared object built on the GPU host); that is not a kernel compile."""
    out = set()
    for name in os.listdir(cache_dir):
        files = os.listdir(os.path.join(cache_dir, name))
        if any(f.endswith(".cubin") for f in files):
            out.add(name)
        else:
            print("not a kernel entry:", name, files)
    return out


def gemm_candidates(target, count=4):
    """Real GEMM candidates: the family's first seeds and random valid genomes (none may go missing)."""
    op = operators.get("gemm")
    problem = op.problem((1024, 1024, 1024), "bf16")
    rng = np.random.default_rng(7)
    genomes = op.family.seeds(problem, target)[:2] + [op.family.random(rng, problem, target) for _ in range(count)]
    return [make_candidate(op, g, problem, target) for g in genomes]


def test_first_launch_hits_the_cache(tmp_path):
    cache = str(tmp_path / "triton-cache")
    os.makedirs(cache)
    with GpuWorker(0, settings=EvaluationSpec(reps=5), cache_dir=cache) as worker:
        target = worker.info.target
        toys = [candidate("none", n=n, dtype=dt) for n, dt in ((4096, "fp16"), (1000, "fp32"), (1, "fp16"))]
        gemms = gemm_candidates(target)
        assert len(gemms) == 6
        with CompileChild(GpuBackend(cache_dir=cache), target, timeout_s=300) as compiler:
            failed = [pipeline.compiled(c, compiler.compile(c)) for c in toys + gemms]
        assert not any(failed[:len(toys)]), failed
        assert sum(f is None for f in failed[len(toys):]) >= 4, [f.reason for f in failed if f]  # seeds compile
        before = entries(cache)
        assert len(before) >= len(toys)
        launched = 0
        for i, c in enumerate(toys + gemms):
            if failed[i] is not None:
                continue
            ev = pipeline.measure(worker, c, timeout_s=120)
            assert ev.status == "ok", (c.genome, ev.status, ev.reason)  # seeds and toys are correct kernels
            launched += 1
            assert ev.resources["cache_hit"] is True, (c.compiled.cache_hashes, ev.resources["gpu_kernels"])
            assert ev.resources["eval"]["load_s"] < 5
        assert launched >= len(toys) + 4
        assert entries(cache) == before, "the GPU compiled something the CPU had compiled already"
        # control: a kernel nobody compiled ahead makes a new cache entry, so the count above can see one
        cold = worker.evaluate(candidate("none", n=8192 + 3, block=512), timeout_s=120)
        assert cold.status == "ok" and cold.resources["cache_hit"] is None
        assert len(entries(cache)) > len(before)
