"""GPU probe: where a padded-row GEMM (pad_rows) spends its time, against torch.compile's pad-then-matmul.

For each shape whose N is odd, in one process, timed interleaved with cuBLAS on the same inputs:
- `pad_copy`: the launcher's copy of B into padded rows, alone;
- `pad_kernel`: the evo module with pad_rows (B copied every call, C computed into padded rows and copied
  into `out`), per genome;
- `prepadded_desc_c`: the same genome rendered for the padded problem (N rounded up to 8) and run on an
  already padded B into a padded C through a descriptor: the kernel alone, no copy, aligned stores;
- `pad_kernel_no_out`: the evo module called without `out` (C returned as a view of its padded rows).
A stream-K section times persistent 128x256 kernels with and without stream-K on ragged squares.

    python tools/probe_pad.py        # writes $EVO_OUT/probe_pad.json
"""

# ruff: noqa: B008, B023  (every lambda is timed within the iteration that made it)
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

PAD_SHAPES = [(1536, 3001, 5120), (1024, 50257, 1600)]
PAD_GENOMES = [
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, memory="host_descriptor", pad_rows=True),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, memory="host_descriptor", pad_rows=True),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor", pad_rows=True,
         persistent=True),
]
SK_SHAPES = [(3000, 3000, 3000), (4096, 4544, 4544)]
SK_GENOMES = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, memory="host_descriptor", persistent=True),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, memory="host_descriptor", persistent=True,
         stream_k=True),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor", persistent=True,
         stream_k=True, epilogue_subtile=True),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor", GROUP_M=16),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, memory="descriptor", GROUP_M=4),
]


def _load(op: Any, values: dict[str, Any], problem: Any, target: Any) -> Any:
    from evo.evaluate.modules import load_source

    genome = op.family.make({**op.family.base(), **values})
    return load_source(op.render(genome, problem, target)).matmul


def main() -> int:
    import torch

    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import operators
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target

    op, target, rows = operators.get("gemm"), Target.from_torch(), []
    for shape in PAD_SHAPES:
        problem = op.problem(shape, "bf16")
        a, b = op.make_inputs(problem, 0, device="cuda")
        M, N, K = shape
        Np = -(-N // 8) * 8
        bp = torch.zeros((K, Np), device="cuda", dtype=b.dtype)
        bp[:, :N] = b
        cp = torch.empty((M, Np), device="cuda", dtype=b.dtype)
        out = torch.empty((M, N), device="cuda", dtype=b.dtype)
        padded = op.problem((M, Np, K), "bf16")
        fns: dict[str, Any] = {"cublas": lambda: torch.matmul(a, b),
                               "pad_copy": lambda: torch.empty((K, Np), device="cuda", dtype=b.dtype)[:, :N].copy_(b)}
        for i, values in enumerate(PAD_GENOMES):
            fns[f"g{i}_pad_kernel"] = lambda f=_load(op, values, problem, target): f(a, b, out=out)
            plain = {**values, "pad_rows": False}
            fns[f"g{i}_prepadded_desc_c"] = lambda f=_load(op, plain, padded, target): f(a, bp, out=cp)
            fns[f"g{i}_pad_kernel_no_out"] = lambda f=_load(op, values, problem, target): f(a, b)
        for fn in fns.values():  # every candidate once before timing: compile outside the measurement
            fn()
        torch.cuda.synchronize()
        timings = time_interleaved(list(fns.values()), reps=30)
        us = {k: round(t.median_ms * 1000, 1) for k, t in zip(fns, timings, strict=True)}
        row = {"problem": problem.key, "us": us}
        rows.append(row)
        print(json.dumps(row), flush=True)
    for shape in SK_SHAPES:
        problem = op.problem(shape, "bf16")
        a, b = op.make_inputs(problem, 0, device="cuda")
        out = torch.empty((shape[0], shape[1]), device="cuda", dtype=a.dtype)
        fns = {"cublas": lambda: torch.matmul(a, b)}
        for i, values in enumerate(SK_GENOMES):
            f = _load(op, values, problem, target)
            check = torch.full_like(out, float("nan"))
            f(a, b, out=check)
            err = float((check.float() - op.reference(a, b)).norm() / op.reference(a, b).norm())
            assert err < op.tolerance(problem), (values, err)
            fns[f"sk{i}"] = lambda f=f: f(a, b, out=out)
        timings = time_interleaved(list(fns.values()), reps=30)
        base = timings[0].median_ms
        row = {"problem": problem.key, "vs_cublas": {k: round(base / t.median_ms, 3)
                                                      for k, t in zip(fns, timings, strict=True)}}
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(os.environ.get("EVO_OUT") or "/tmp", "probe_pad.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
