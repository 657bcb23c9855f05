"""GPU probe: the L2 flush's write-back cost, and stream-K against its data-parallel twin.

Two questions, one process per GPU, everything timed interleaved with cuBLAS on the same inputs:

1. How much does the flush between timed runs decide? Each problem's cuBLAS (and, for GEMM, a fixed evo genome)
   is timed after a flush that writes 256 MiB (a memset, as triton.testing.do_bench does) and after one that
   reads it (evo.evaluate.timing's default), which leaves no dirty lines for the timed run to write back.
2. Does stream-K pay? Each stream-K genome is checked three times on fresh random inputs with a NaN-poisoned
   output (a race shows as a moving error or unwritten outputs), then timed beside cuBLAS and beside the same
   genome without stream-K.

    python tools/probe_stream_k.py            # writes $EVO_OUT/probe_stream_k.json (or /tmp)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

FLUSH_PROBLEMS = [("gemm", (16, 4096, 4096)), ("gemm", (16, 28672, 4096)), ("gemm", (128, 4096, 14336)),
                  ("gemm", (4096, 4096, 4096)), ("softmax", (8192, 5000)), ("rmsnorm", (8192, 5000))]
HOST_SK = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, persistent=True,
               memory="host_descriptor", epilogue_subtile=True)
# (shape, genome values over GemmFamily.base() with stream_k=True; each is also timed without it)
STREAM_K = [
    ((1000, 3000, 2000), HOST_SK),
    ((1000, 3000, 2000), {**HOST_SK, "num_stages": 4}),
    ((1000, 3000, 2000), dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, persistent=True,
                              memory="host_descriptor")),
    ((1000, 3000, 2000), dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, persistent=True,
                              memory="descriptor")),
    ((128, 4096, 14336), dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, persistent=True,
                              memory="host_descriptor")),
    ((128, 4096, 14336), dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, persistent=True,
                              memory="host_descriptor")),
    ((16, 4096, 4096), dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, persistent=True,
                            memory="host_descriptor")),
    ((16, 4096, 4096), dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=256, num_warps=4, num_stages=3, persistent=True,
                            memory="pointer")),
    ((4096, 4096, 4096), HOST_SK),
    ((8192, 8192, 8192), HOST_SK),
]
CHECKS = 3


def _elite(operator: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """The committed bench's elite genome for one shape (genes added since then take their base values)."""
    path = Path(__file__).resolve().parents[1] / f"reports/bench/{operator}-nvidia-h200.json"
    for p in json.loads(path.read_text())["problems"]:
        if tuple(p[d] for d in p["dims"]) == shape:
            return p["evo_genome"]
    raise KeyError(f"{operator} {shape} is not in {path}")


def _bound(fn: Any, inputs: tuple[Any, ...]) -> Any:
    return lambda: fn(*inputs)


def _check(op: Any, module: Any, problem: Any, seed: int) -> tuple[str, float]:
    import torch

    a, b = op.make_inputs(problem, seed, device="cuda")
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=a.dtype)
    module.matmul(a, b, out=out)
    torch.cuda.synchronize()
    if torch.isnan(out).any():
        return f"{int(torch.isnan(out).sum())} outputs unwritten", float("inf")
    ref = op.reference(a, b)
    err = float((out.float() - ref).norm() / ref.norm())
    return ("ok" if err <= op.tolerance(problem) else "wrong"), err


def flush_rows() -> list[dict[str, Any]]:
    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target

    target, rows = Target.from_torch(), []
    for name, shape in FLUSH_PROBLEMS:
        op = operators.get(name)
        problem = op.problem(shape, "bf16")
        inputs = op.make_inputs(problem, 0, device="cuda")
        baseline = op.baselines()[0]
        genome = op.family.make({**op.family.base(), **_elite(name, shape)})
        module = load_source(op.render(genome, problem, target))
        fns = {baseline.name: _bound(baseline.make(problem), inputs),
               "evo_elite": _bound(getattr(module, op.entry), inputs)}
        row: dict[str, Any] = {"problem": problem.key, "bytes": op.bytes(problem)}
        for mode in ("write", "read"):
            timings = time_interleaved(list(fns.values()), reps=100, flush=mode)
            for label, t in zip(fns, timings, strict=True):
                row[f"{label}_{mode}_ms"] = t.median_ms
        rows.append(row)
        print("flush", json.dumps(row), flush=True)
    return rows


def stream_k_rows() -> list[dict[str, Any]]:
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target

    op, target, rows = operators.get("gemm"), Target.from_torch(), []
    for shape, values in STREAM_K:
        problem = op.problem(shape, "bf16")
        row: dict[str, Any] = {"problem": problem.key, "genome": values}
        modules = {}
        for sk in (True, False):
            genome = op.family.make(op.family.base(**{**values, "stream_k": sk}))
            reasons = op.family.violations(genome, problem, target)
            if reasons:
                row[f"invalid_{sk}"] = reasons
                continue
            started = time.perf_counter()
            try:
                module = load_source(op.render(genome, problem, target))
                checks = [_check(op, module, problem, seed) for seed in range(CHECKS)]
            except Exception as exc:  # noqa: BLE001 - a failure is a row of the report
                row[f"error_{sk}"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                if "CUDA" in row[f"error_{sk}"] or "illegal" in row[f"error_{sk}"]:
                    rows.append(row)
                    return rows  # the context is gone
                continue
            row[f"checks_{sk}"] = checks
            row[f"first_s_{sk}"] = round(time.perf_counter() - started, 2)
            if all(status == "ok" for status, _ in checks):
                modules[sk] = module
        a, b = op.make_inputs(problem, 7, device="cuda")
        fns = [_bound(torch.matmul, (a, b))] + [_bound(m.matmul, (a, b)) for m in modules.values()]
        timings = time_interleaved(fns, reps=100)
        row["cublas_ms"] = timings[0].median_ms
        for sk, t in zip(modules, timings[1:], strict=True):
            row[f"ms_{sk}"] = t.median_ms
            row[f"vs_cublas_{sk}"] = round(timings[0].median_ms / t.median_ms, 4)
        rows.append(row)
        print("stream_k", json.dumps(row), flush=True)
    return rows


def diagnostic_rows() -> list[dict[str, Any]]:
    """Where stream-K's time goes at 1000x3000x2000: the rendered kernel, the same with its fix-up removed
    (every tile stored as if one program covered it: wrong output, timed only to bound the fix-up's cost),
    and the data-parallel twin. Not checked; never leaves this probe."""
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target

    op, target = operators.get("gemm"), Target.from_torch()
    problem = op.problem((1000, 3000, 2000), "bf16")
    a, b = op.make_inputs(problem, 3, device="cuda")
    rows = []
    for values in (HOST_SK, {**HOST_SK, "epilogue_subtile": False}, {**HOST_SK, "num_stages": 4}):
        sk = op.render(op.family.make(op.family.base(**{**values, "stream_k": True})), problem, target)
        variants = {"stream_k": sk, "no_fixup": sk.replace("if parts == 1:", "if True:"),
                    "data_parallel": op.render(op.family.make(op.family.base(**values)), problem, target)}
        fns = [_bound(torch.matmul, (a, b))] + [_bound(load_source(v).matmul, (a, b)) for v in variants.values()]
        timings = time_interleaved(fns, reps=100)
        row = {"genome": values, "cublas_ms": timings[0].median_ms}
        row.update({name: t.median_ms for name, t in zip(variants, timings[1:], strict=True)})
        rows.append(row)
        print("diagnostic", json.dumps(row), flush=True)
    return rows


def table(result: dict[str, Any]) -> str:
    lines = [f"flush: median ms after a write flush / after a read flush ({result['device']})"]
    for r in result["flush"]:
        cells = [f"{k[:-9]} {r[k]:.4f}/{r[k.replace('_write_', '_read_')]:.4f}" for k in r if k.endswith("_write_ms")]
        lines.append(f"  {r['problem']:28s} " + "   ".join(cells))
    for r in result["diagnostic"]:
        lines.append("diagnostic 1000x3000x2000 ms: " + "  ".join(f"{k} {v:.4f}" for k, v in r.items() if k != "genome")
                     + f"  {r['genome']['num_stages']} stages, subtile {r['genome']['epilogue_subtile']}")
    lines.append("stream-K: vs cuBLAS with / without stream-K (read flush)")
    for r in result["stream_k"]:
        g = r["genome"]
        text = f"{g['BLOCK_M']}x{g['BLOCK_N']}x{g['BLOCK_K']} w{g['num_warps']} s{g['num_stages']} {g['memory']}"
        bad = {k: v for k, v in r.items() if k.startswith(("error", "invalid"))
               or (k.startswith("checks") and any(s != "ok" for s, _ in v))}
        lines.append(f"  {r['problem']:28s} {text:44s} {r.get('vs_cublas_True', 0):.3f} / "
                     f"{r.get('vs_cublas_False', 0):.3f}  cuBLAS {r.get('cublas_ms', 0):.4f} ms {bad or ''}")
    return "\n".join(lines)


def main() -> int:
    import torch
    import triton

    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__}
    parts = os.environ.get("PROBE", "stream_k,flush").split(",")
    result["diagnostic"] = diagnostic_rows() if "diagnostic" in parts else []
    result["stream_k"] = stream_k_rows() if "stream_k" in parts else []
    result["flush"] = flush_rows() if "flush" in parts else []
    from tests.gpu import write_json

    write_json("probe_stream_k.json", result)
    print(table(result))
    return 0


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
