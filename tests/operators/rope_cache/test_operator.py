"""rope_cache as evo runs it and as users call it: the pipeline's check through the operator, the rendered module
holding the kernel and launcher files verbatim, the torch op that torch.compile traces with the cache written in
place (no copy), and the exported self-check's reference catching a wrong cache write."""

from __future__ import annotations

import pytest
import torch

import operators
from evo.api import as_torch_op
from evo.evaluate.check import run_check
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from operators.rope_cache.module import pasted
from operators.rope_cache.torch_code import rope_checked_reference, rope_written

OP = operators.get("rope_cache")
TARGET = INTERPRETED_HOPPER
PROBLEM = OP.problem((3, 4, 2, 64, 8), "fp16")


@pytest.fixture(scope="module")
def module():
    return load_source(OP.render(OP.family.seeds(PROBLEM, TARGET)[0], PROBLEM, TARGET))


def test_the_rendered_module_is_the_kernel_and_launcher_files(module):
    source = OP.render(OP.family.seeds(PROBLEM, TARGET)[0], PROBLEM, TARGET)
    assert pasted("kernel.py") in source and pasted("launcher.py") in source
    assert pasted("kernel.py").startswith("# ---- the rope_cache kernel") and "@triton.jit" in pasted("kernel.py")
    assert "from evo" not in source and "import operators" not in source  # standalone: torch and triton only
    assert source.rstrip().endswith("rope_cache = rope_cache_entry(BLOCK_T, BLOCK_H, BLOCK_D, SPLIT_ROLES, "
                                    "EVICT_QKV, NUM_WARPS)")


def test_the_pipeline_check_passes_the_kernel_and_the_torch_code(module):
    for seed in (0, 1):
        res = run_check(module.rope_cache, OP, PROBLEM, seed, device="cpu")
        assert res.status == "ok" and res.takes_out and res.max_rel_error < OP.tolerance(PROBLEM), res.reason
        for baseline in OP.baselines()[:1]:  # torch.compile of the baseline is too slow for the CPU suite
            assert run_check(baseline.make(PROBLEM), OP, PROBLEM, seed, device="cpu").status == "ok"


def test_shapes_sizes_and_refusals():
    inputs = OP.make_inputs(PROBLEM, 0, "meta")
    assert [tuple(t.shape) for t in inputs] == OP.tensor_shapes(PROBLEM)
    assert OP.bytes(PROBLEM) == 2 * 3 * 8 * 64 * 2 + 2 * 3 * 64 * 4 and OP.flops(PROBLEM) == 3 * 3 * 6 * 64
    with pytest.raises(ValueError, match="head_dim 81 is odd"):
        OP.problem((1, 4, 2, 81, 8), "bf16")
    empty = OP.empty_output(*OP.make_inputs(PROBLEM, 0, "cpu"))
    assert empty.shape == (1, 4, 3, 64) and empty.dtype == torch.float16


def test_torch_compile_traces_the_op_and_writes_the_cache_in_place(module):
    """The op declares the cache mutated: fullgraph tracing works, and Inductor's code hands the cache buffer itself
    to the op (no copy of the cache, no copy back)."""
    from torch._inductor.utils import run_and_get_code

    op = as_torch_op(module.rope_cache, OP, tag="test_compile")
    qkv, cos, sin, cache, start = OP.make_inputs(PROBLEM, 2, "cpu")
    q_ref, kv_ref = OP.reference(qkv, cos, sin, cache, start)

    class Layer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("cache", cache.clone())

        def forward(self, qkv, cos, sin, start):
            return op(qkv, cos, sin, self.cache, start)

    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        layer = Layer()
        before = layer.cache.clone()
        compiled = torch.compile(layer, fullgraph=True, backend=backend)
        if backend == "inductor":
            q, codes = run_and_get_code(compiled, qkv, cos, sin, start)
            code = "\n".join(codes)
            assert "torch.ops.evo.rope_cache_test_compile" in code
            assert ".copy_(" not in code and "clone" not in code, code
        else:
            q = compiled(qkv, cos, sin, start)
        assert (q.float() - q_ref).norm() / q_ref.norm() < 2e-3
        written = rope_written(layer.cache, start, 3).float()
        assert (written - kv_ref).norm() / kv_ref.norm() < 2e-3, backend
        rope_written(layer.cache, start, 3).copy_(rope_written(before, start, 3))
        assert torch.equal(layer.cache, before)  # nothing else of the cache changed


def test_the_exported_self_check_reference_catches_a_wrong_cache_write(capsys):
    qkv, cos, sin, cache, start = OP.make_inputs(PROBLEM, 0, "cpu")
    rope_written(cache, start, 3).fill_(float("nan"))  # as the self-check's inputs: nothing written yet
    assert not rope_checked_reference(qkv, cos, sin, cache, start, 2e-3).isnan().any()
    OP.baselines()[0].make(PROBLEM)(qkv, cos, sin, cache, start)  # a right write
    assert not rope_checked_reference(qkv, cos, sin, cache, start, 2e-3).isnan().any()
    rope_written(cache, start, 3)[0] *= -1  # keys with the wrong sign
    assert rope_checked_reference(qkv, cos, sin, cache, start, 2e-3).isnan().all()
    assert "FAIL: the keys and values written into the cache" in capsys.readouterr().out


def test_evo_bench_judges_each_contenders_cache_write():
    """`evo bench` checks every contender with the search's check: one that skips the cache write is not timed.
    (The timer here is a stand-in returning made-up numbers: only the statuses are under test.)"""
    from types import SimpleNamespace

    from evo.bench.measure import Entrant, measure_contenders
    from operators.rope_cache.torch_code import torch_rope_cache

    def skips_the_cache(problem):
        return lambda qkv, cos, sin, cache, start: torch_rope_cache(qkv, cos, sin, cache.clone(), start)

    def stand_in_timer(fns, **_):
        return [SimpleNamespace(median_ms=1.0, spread_ms=0.0, times_ms=[1.0]) for _ in fns]

    entrants = [Entrant("torch_eager", OP.baselines()[0].make), Entrant("skips", skips_the_cache)]
    results = measure_contenders(OP, PROBLEM, entrants, timer=stand_in_timer, device="cpu")
    assert [r.status for r in results] == ["ok", "wrong"]
    assert "not timed" in results[1].reason and results[1].median_ms is None
