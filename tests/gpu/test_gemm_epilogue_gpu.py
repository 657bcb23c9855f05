"""Fused-epilogue GEMMs on a real GPU: every sampled genome that compiles must match the fp32 reference.

For each epilogue (bias+GELU, SwiGLU, scale+bias+ReLU+residual, SiLU+residual, GELU tanh, GeGLU), the family's seeds
and a seeded random sample are rendered for a ragged and an aligned bf16 problem, compiled by their first
launch and checked by the search's own check (evo.evaluate.check, output poisoned first); correct ones are
timed against the eager baseline (median of triton.testing.do_bench, for information only). Writes JSON to
$EVO_OUT (or /tmp) and prints a table. Run with pytest (`-m gpu`) or as a script:

    python -m tests.gpu.test_gemm_epilogue_gpu
"""

from __future__ import annotations

import time
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:
    pytest = None

CASES = (("gemm+bias+gelu", (1000, 3000, 2000)), ("gemm+swiglu", (1000, 1536, 2000)),
         ("gemm+swiglu", (2048, 4096, 4096)), ("gemm+scale+bias+relu+residual", (777, 4096, 1000)),
         ("gemm+silu+residual", (16, 4096, 4096)), ("gemm+gelu_tanh", (4096, 4096, 4096)),
         ("gemm+geglu", (1000, 1536, 2000)))
RANDOM = 6


def run_sample(dtype: str = "bf16", time_kernels: bool = True) -> dict[str, Any]:
    import numpy as np
    import torch
    import triton

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target
    from tests.gpu import search_check

    target = Target.from_torch()
    rows: list[dict[str, Any]] = []
    for name, shape in CASES:
        op = operators.get(name)
        problem = op.problem(shape, dtype)
        inputs = op.make_inputs(problem, 0, device="cuda")
        ref = op.reference(*inputs)
        eager = op.baselines()[0].make(problem)
        eager_ms = triton.testing.do_bench(lambda f=eager, x=inputs: f(*x), return_mode="median") \
            if time_kernels else 0.0
        rng = np.random.default_rng(0)
        genomes = list(op.family.seeds(problem, target)) + [op.family.random(rng, problem, target)
                                                             for _ in range(RANDOM)]
        for genome in genomes:
            row: dict[str, Any] = {"problem": problem.key, "text": str(genome)}
            rows.append(row)
            started = time.perf_counter()
            try:
                module = load_source(op.render(genome, problem, target))
            except Exception as exc:  # noqa: BLE001
                row.update(status="render_failed", reason=str(exc)[:300])
                continue
            status, err, reason, _ = search_check(module.matmul, inputs, ref, op.tolerance(problem))
            row.update(status=status, error=err, reason=reason, first_call_s=round(time.perf_counter() - started, 2))
            if status == "crashed":
                return {"device": torch.cuda.get_device_name(), "rows": rows}
            if status == "correct" and time_kernels:
                ms = triton.testing.do_bench(lambda m=module, x=inputs: m.matmul(*x), return_mode="median")
                row.update(ms=ms, vs_eager=eager_ms / ms)
            print(problem.key, status, f"{row.get('vs_eager', 0):.2f}x eager", reason or "", genome, flush=True)
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "rows": rows}


def summary(result: dict[str, Any]) -> str:
    lines = [f"fused-epilogue GEMM sample on {result['device']}",
             f"{'problem':44s}{'genomes':>8s}{'correct':>8s}{'wrong':>6s}{'failed':>7s}{'best/eager':>11s}"]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in result["rows"]:
        by.setdefault(r["problem"], []).append(r)
    for key, rows in by.items():
        count = lambda *s, rows=rows: sum(r["status"] in s for r in rows)  # noqa: E731
        best = max((r.get("vs_eager", 0.0) for r in rows), default=0.0)
        lines.append(f"{key:44s}{len(rows):8d}{count('correct'):8d}{count('wrong'):6d}"
                     f"{count('compile_failed', 'render_failed', 'crashed'):7d}{best:11.2f}")
    return "\n".join(lines)


def test_sampled_epilogue_kernels_are_correct_and_compile():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from tests.gpu import write_json

    result = run_sample()
    write_json("gemm_epilogue_gpu.json", result)
    print(summary(result))
    wrong = [r for r in result["rows"] if r["status"] == "wrong"]
    failed = [r for r in result["rows"] if r["status"] not in ("correct", "wrong")]
    assert not wrong, f"{len(wrong)} kernels ran but were wrong, e.g. {wrong[0]}"
    # a genome the validity rules let through must compile: the rules say what Triton cannot
    assert not failed, f"{len(failed)} valid genomes failed to compile or run, e.g. {failed[0]}"


if __name__ == "__main__":
    from tests.gpu import write_json

    res = run_sample()
    write_json("gemm_epilogue_gpu.json", res)
    print(summary(res))
