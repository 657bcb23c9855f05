"""Split row-wise kernels (genes split, split_mode) on a real GPU: every sampled genome correct, and the
cooperative kernel unable to hang.

Each check runs in a child process under a timeout, so a kernel that waited forever would fail the test instead
of stalling it. The sample: for softmax and RMSNorm at few-row and very wide shapes, in bf16 and fp16, the
family's split seeds, a seeded sample of random split genomes and a fixed set of splits in both modes; each is
checked against the fp32 reference with the search's own check and timed (median, L2 flushed) beside torch eager
for information. The hang test pretends the GPU has only as many SMs as the largest split (64), one program
each, so a cooperative launch gets exactly one group of 64 programs that walks every row in turn.

    python -m pytest tests/gpu/test_rowwise_split.py -m gpu -s
    python tests/gpu/test_rowwise_split.py            # the sample as a table
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ((1, 32000), (4, 50257), (8, 131072), (1, 256000), (2048, 262144), (3, 1000))
DTYPES = ("bf16", "fp16")
FIXED = ((2, "two_launch"), (8, "two_launch"), (64, "two_launch"), (2, "cooperative"), (16, "cooperative"),
         (64, "cooperative"))
SEED = 0


def _genomes(op: Any, problem: Any, target: Any, n_random: int) -> list[tuple[str, Any]]:
    import numpy as np

    from genomes.base import InvalidGenome

    fam = op.family
    out = [(f"seed{i:02d}", g) for i, g in enumerate(fam.seeds(problem, target)) if g["split"] > 1]
    rng = np.random.default_rng(SEED)
    for split, mode in FIXED:
        raw = fam.base(BLOCK=fam.single_block(problem, split), num_warps=8, split=split, split_mode=mode)
        try:
            out.append((f"{mode[:4]}{split}", fam.repair(fam.make(raw), problem, target, rng)))
        except InvalidGenome:
            continue
    drawn = [g for g in (fam.random(rng, problem, target) for _ in range(40 * n_random)) if g["split"] > 1]
    out += [(f"r{i:02d}", g) for i, g in enumerate(drawn[:n_random])]
    seen: set[str] = set()
    return [(label, g) for label, g in out if not (g.hash in seen or seen.add(g.hash))]


def _bench(fn: Any) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


def child_sample(ops: list[str], n_random: int, time_kernels: bool) -> list[dict[str, Any]]:
    """Runs in the child: check (and time) the sample; one row per kernel."""
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target
    from tests.gpu import search_check

    target = Target.from_torch()
    rows = []
    for name in ops:
        op = operators.get(name)
        for shape in SHAPES:
            for dtype in DTYPES:
                problem = op.problem(shape, dtype)
                inputs = op.make_inputs(problem, SEED, device="cuda")
                ref = op.reference(*inputs)
                eager = op.baselines()[0].make(problem)
                eager_ms = _bench(lambda e=eager, i=inputs: e(*i)) if time_kernels else None
                for label, genome in _genomes(op, problem, target, n_random):
                    row = {"problem": problem.key, "label": label, "genome": str(genome), "eager_ms": eager_ms}
                    launch = getattr(load_source(op.render(genome, problem, target)), op.entry)
                    status, err, reason, out = search_check(launch, inputs, ref, op.tolerance(problem))
                    row.update(status=status, error=err, reason=reason)
                    if status == "correct" and time_kernels:
                        row["ms"] = _bench(lambda f=launch, o=out, i=inputs: f(*i, out=o))
                        row["gbs"] = op.throughput(problem, row["ms"])
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if status == "crashed":
                        return rows
                inputs = ref = None  # free the GPU memory before the next shape
                torch.cuda.empty_cache()
    return rows


def child_smallest_gpu() -> list[dict[str, Any]]:
    """Runs in the child: cooperative split=64 on a GPU pretending to have 64 SMs that hold one program each."""
    import numpy as np
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target
    from tests.gpu import search_check

    real = torch.cuda.get_device_properties(0)
    target = Target.from_torch()
    rows = []
    for name in ("softmax", "rmsnorm"):
        op = operators.get(name)
        for shape in ((8, 131072), (2048, 262144), (3, 1000), (1, 256000)):
            problem = op.problem(shape, "bf16")
            values = op.family.base(BLOCK=op.family.single_block(problem, 64), num_warps=4, split=64,
                                    split_mode="cooperative")
            genome = op.family.repair(op.family.make(values), problem, target, np.random.default_rng(0))
            assert genome["split"] == 64 and genome["split_mode"] == "cooperative", genome
            module = load_source(op.render(genome, problem, target))
            fake = {k: getattr(real, k) for k in ("name", "major", "minor", "regs_per_multiprocessor",
                                                   "shared_memory_per_multiprocessor") if hasattr(real, k)}
            fake.update(multi_processor_count=64, max_threads_per_multi_processor=32 * genome["num_warps"])
            inputs = op.make_inputs(problem, SEED, device="cuda")
            launch = getattr(module, op.entry)
            original = torch.cuda.get_device_properties
            torch.cuda.get_device_properties = lambda device, f=fake: type("Props", (), f)()
            try:  # the plan (made by the first call) reads the pretended GPU
                status, err, reason, _ = search_check(launch, inputs, op.reference(*inputs), op.tolerance(problem))
                torch.cuda.synchronize()
            finally:
                torch.cuda.get_device_properties = original
            grid = next(iter(module._PLANS.values())).kernel.grid
            rows.append({"problem": problem.key, "genome": str(genome), "grid": list(grid), "status": status,
                         "error": err, "reason": reason})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _run_child(args: list[str], timeout_s: float) -> list[dict[str, Any]]:
    from tests.gpu import run_child

    return run_child(Path(__file__).resolve(), args, timeout_s)


def test_split_sample_is_correct():
    rows = _run_child(["--child", "sample", "--random", "3"], timeout_s=540)
    from tests.gpu import write_json

    path = write_json("rowwise_split_gpu.json", rows)
    print(f"\n{len(rows)} split kernels (JSON: {path})")
    for r in rows:
        speed = f"{r['gbs']:7.0f} GB/s {r['eager_ms'] / r['ms']:5.2f}x eager" if "ms" in r else ""
        print(f"{r['problem']:28s} {r['label']:9s} {r['status']:8s} {speed}  {r['genome']}")
    assert len(rows) >= 2 * len(SHAPES) * len(DTYPES) * 4
    assert {r["problem"] for r in rows} >= {f"softmax:{m}x{n}:bf16" for m, n in SHAPES}
    bad = [r for r in rows if r["status"] != "correct"]
    assert not bad, "\n".join(f"{r['problem']} {r['label']} {r['status']} {r['reason']}: {r['genome']}" for r in bad)
    assert any("cooperative" in r["genome"] for r in rows) and any("two_launch" in r["genome"] for r in rows)


def test_cooperative_cannot_hang_at_the_largest_split_on_the_smallest_gpu():
    rows = _run_child(["--child", "smallest"], timeout_s=240)
    assert len(rows) == 8
    for r in rows:
        assert r["status"] == "correct", r
        assert r["grid"][0] == 64, r  # one group: 64 SMs pretended, one program each


def main(argv: list[str]) -> int:
    if argv[:2] == ["--child", "sample"]:
        n_random = int(argv[argv.index("--random") + 1]) if "--random" in argv else 3
        child_sample(["softmax", "rmsnorm"], n_random, time_kernels=True)
        return 0
    if argv[:2] == ["--child", "smallest"]:
        child_smallest_gpu()
        return 0
    rows = _run_child(["--child", "sample", "--random", "3"], timeout_s=1800)
    for r in rows:
        speed = f"{r['gbs']:7.0f} GB/s {r['eager_ms'] / r['ms']:5.2f}x eager" if "ms" in r else ""
        print(f"{r['problem']:28s} {r['label']:9s} {r['status']:8s} {speed}  {r['genome']}")
    return int(any(r["status"] != "correct" for r in rows))


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
