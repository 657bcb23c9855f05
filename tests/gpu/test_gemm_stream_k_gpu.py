"""The Gluon stream-K GEMM on a real GPU (operators/gemm/gluon_split.py): every case must match the fp32 reference,
on its first launch and again on later launches of the same plan (each shared tile's last run resets its arrival
counter; a counter left behind would make the next launch sum the wrong partials).

The cases cover the schedule's phases on 132 SMs: tiles under one wave, all shared (777x4096x4096: 112 tiles of
128x256, two runs on most), a few tiles with long K (256x512x16384: 4 tiles, eight runs each), whole waves then
shared tiles (4096x4096x4096: 512 tiles, 396 whole), rows that are not 16-byte multiples (padded copies), a fused
epilogue applied by the run that stores, and one consumer of two warp groups, a row split of two consumers and a
128x128 tile. Correct kernels are timed against cuBLAS for information. Writes JSON to $EVO_OUT (or /tmp):

    python -m tests.gpu.test_gemm_stream_k_gpu
"""

from __future__ import annotations

import time
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

GLUON_SK = {"backend": "gluon", "memory": "host_descriptor", "persistent": True, "stream_k": True, "BLOCK_K": 64}
SCHEDULES = {
    "coop128x256": dict(BLOCK_M=128, BLOCK_N=256, num_stages=3, num_warps=8),
    "rows128x256": dict(BLOCK_M=128, BLOCK_N=256, num_stages=3, num_warps=4, consumers=2, consumer_split="rows"),
    "coop128x128": dict(BLOCK_M=128, BLOCK_N=128, num_stages=4, num_warps=8),
}
CASES = (  # (operator, shape, dtype, schedules)
    ("gemm", (777, 4096, 4096), "bf16", tuple(SCHEDULES)),
    ("gemm", (256, 512, 16384), "fp16", tuple(SCHEDULES)),
    ("gemm", (4096, 4096, 4096), "bf16", ("coop128x256", "rows128x256")),
    ("gemm", (1000, 3001, 588), "bf16", ("coop128x256", "rows128x256")),
    ("gemm+bias+gelu", (777, 4096, 4096), "bf16", ("rows128x256",)),
)
LAUNCHES = 3  # the first and two later launches of one plan are each checked


def run_cases() -> dict[str, Any]:
    import numpy as np
    import torch
    import triton

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target
    from tests.gpu import search_check

    target = Target.from_torch()
    rows: list[dict[str, Any]] = []
    for name, shape, dtype, schedules in CASES:
        op = operators.get(name)
        problem = op.problem(shape, dtype)
        inputs = op.make_inputs(problem, 0, device="cuda")
        ref = op.reference(*inputs)
        cublas_ms = triton.testing.do_bench(lambda x=inputs: torch.matmul(x[0], x[1]), return_mode="median")
        for label in schedules:
            raw = op.family.make(op.family.base(**GLUON_SK, **SCHEDULES[label]))
            genome = op.family.repair(raw, problem, target, np.random.default_rng(0))
            row: dict[str, Any] = {"case": f"{name} {problem.key}", "schedule": label, "genome": str(genome)}
            rows.append(row)
            if not genome["stream_k"] or genome["backend"] != "gluon":
                row.update(status="not_stream_k", reason=f"repaired to {genome}")
                continue
            print(label, problem.key, name, end=" ", flush=True)
            started = time.perf_counter()
            module = load_source(op.render(genome, problem, target))
            statuses = []
            for _ in range(LAUNCHES):  # search_check draws nothing new: the same inputs, the plan reused
                status, err, reason, _ = search_check(module.matmul, inputs, ref, op.tolerance(problem))
                statuses.append(status)
                row.setdefault("errors", []).append(err)
                if status != "correct":
                    row["reason"] = reason
                    break
            row.update(status=statuses[-1], launches=statuses, first_call_s=round(time.perf_counter() - started, 2))
            if row["status"] == "correct":
                ms = triton.testing.do_bench(lambda m=module, x=inputs: m.matmul(*x), return_mode="median")
                row.update(ms=ms, tflops=op.throughput(problem, ms), vs_cublas=cublas_ms / ms)
                # once more after timing: hundreds of launches later the counters still start from zero
                status, err, reason, _ = search_check(module.matmul, inputs, ref, op.tolerance(problem))
                row.update(status=status, after_timing_error=err, reason=reason if status != "correct" else "")
            print(row["status"], f"{row.get('vs_cublas', 0):.2f}x cuBLAS", flush=True)
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "rows": rows}


def summary(result: dict[str, Any]) -> str:
    lines = [f"Gluon stream-K GEMM on {result['device']} (triton {result['triton']})",
             f"{'case':42s}{'schedule':14s}{'status':>12s}{'vs cuBLAS':>11s}"]
    lines += [f"{r['case']:42s}{r['schedule']:14s}{r['status']:>12s}{r.get('vs_cublas', 0):11.2f}"
              + (f"  {r.get('reason', '')}" if r["status"] != "correct" else "") for r in result["rows"]]
    return "\n".join(lines)


def test_stream_k_kernels_are_correct_on_every_launch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("needs a Hopper GPU (sm_90): the Gluon rendering is wgmma's")
    from tests.gpu import write_json

    result = run_cases()
    write_json("gemm_stream_k_gpu.json", result)
    print(summary(result))
    bad = [r for r in result["rows"] if r["status"] != "correct"]
    assert not bad, summary(result)


if __name__ == "__main__":
    from tests.gpu import write_json

    res = run_cases()
    write_json("gemm_stream_k_gpu.json", res)
    print(summary(res))
