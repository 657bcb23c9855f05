"""GPU probe: the Gluon rendering of the GEMM genome (backend=gluon) against cuBLAS and evo's Triton rendering.

For each shape (bf16 unless given), in one process on one GPU: every valid Gluon genome of a small grid (tiles,
ring depth, warps, one or two consumers), each checked on a NaN-poisoned output against the fp32 reference and
timed interleaved with cuBLAS (evo.evaluate.timing: L2 flushed, CUDA events, medians); then the best three
Gluon kernels, evo's Triton seeds that won large shapes before (persistent host-TMA 128x256) and cuBLAS timed
together. Writes $EVO_OUT/probe_gluon.json after every shape and prints a table last.

    python tools/probe_gluon.py [--consumers=1|2] [--split=1,3,4] [--rows] [--jobs=N] [MxNxK[:dtype] ...]

--rows probes the consumers that split every tile's rows (consumer_split=rows: 128 or 192 rows, 64 per consumer)
against the one-consumer 128x192 and 128x256 kernels instead of the default grid.

The kernels are compiled ahead in N processes (default: the machine's CPUs, at most 16), as a search does.

A kernel that faults leaves the CUDA context unusable for the rest of the process: run the two schedules
(--consumers=1, --consumers=2) as separate processes.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

DEFAULT_SHAPES = ["4096x4096x4096", "8192x8192x8192", "3000x3000x3000", "2048x14336x4096", "2048x4096x14336",
                  "1024x1024x32768"]
TRITON_SEEDS = [dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8, persistent=True,
                     memory="host_descriptor", epilogue_subtile=True),
                dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8, memory="host_descriptor")]


def _gluon_grid(op: Any, problem: Any, target: Any, consumers: tuple[int, ...] = (1, 2),
                splits: tuple[int, ...] = (1,), rows: bool = False) -> list[dict[str, Any]]:
    from genomes.gemm_gluon import GLUON_FIXED

    out = []
    if rows:  # consumers that split every tile's rows, and the one-consumer 128x192 and 128x256 they compete with
        grid = [(bm, bn, st, 4, bm // 64, "rows") for bm in (128, 192) for bn in (128, 192, 256) for st in (3, 4)]
        grid += [(128, bn, st, 8, 1, "tiles") for bn in (192, 256) for st in (3, 4)]
        for bm, bn, st, w, c, split in grid:
            values = {**op.family.base(), **GLUON_FIXED, "backend": "gluon", "BLOCK_M": bm, "BLOCK_N": bn,
                      "BLOCK_K": 64, "num_stages": st, "num_warps": w, "consumers": c, "consumer_split": split}
            if not op.family.violations(op.family.make(values), problem, target):
                out.append(values)
        return out
    grid = itertools.product((64, 128, 256), (128, 192, 256), (64,), (3, 4, 5), (4, 8), consumers, splits)
    for bm, bn, bk, st, w, c, sk in grid:
        values = {**op.family.base(), **GLUON_FIXED, "backend": "gluon", "BLOCK_M": bm, "BLOCK_N": bn,
                  "BLOCK_K": bk, "num_stages": st, "num_warps": w, "consumers": c, "split_k": sk}
        if not op.family.violations(op.family.make(values), problem, target):
            out.append(values)
    return out


def probe(spec: str, consumers: tuple[int, ...] = (1, 2), splits: tuple[int, ...] = (1,), jobs: int = 1,
          rows: bool = False) -> dict[str, Any]:
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target
    from tools.probe_ragged import _check

    shape_text, _, dtype = spec.partition(":")
    op, target = operators.get("gemm"), Target.from_torch()
    problem = op.problem(tuple(int(x) for x in shape_text.split("x")), dtype or "bf16")
    a, b = op.make_inputs(problem, 0, device="cuda")
    cublas = lambda: torch.matmul(a, b)  # noqa: E731
    tflops = lambda ms: op.flops(problem) / ms / 1e9  # noqa: E731
    print(f"== {problem.key}", file=sys.stderr, flush=True)
    entries: list[dict[str, Any]] = []
    modules: dict[str, Any] = {}
    candidates = [("gluon", v) for v in _gluon_grid(op, problem, target, consumers, splits, rows)]
    candidates += [("triton", {**op.family.base(), **v}) for v in TRITON_SEEDS]
    if jobs > 1:  # compile ahead in a process pool: the checks below then load each kernel from Triton's cache
        from tests.gpu.precompile import precompile

        precompile([("gemm", problem.sizes, problem.dtype, op.family.make(v).canonical(), target)
                    for _, v in candidates], jobs)
    for kind, values in candidates:
        genome = op.family.make(values)
        entry: dict[str, Any] = {"kind": kind, "genome": genome.as_dict(), "hash": genome.hash}
        try:
            module = load_source(op.render(genome, problem, target))
            entry["status"], entry["err"] = _check(op, module.matmul, problem)
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            entry["status"] = f"error: {type(exc).__name__}: {str(exc)[:400]}"
        if entry["status"] == "ok":
            out = torch.empty((a.shape[0], b.shape[1]), device="cuda", dtype=a.dtype)
            fn = lambda m=module, o=out: m.matmul(a, b, out=o)  # noqa: E731
            t = time_interleaved([cublas, fn], reps=20)
            entry["ms"], entry["vs_cublas"] = t[1].median_ms, t[0].median_ms / t[1].median_ms
            modules[genome.hash] = fn
        g = genome.as_dict()
        print(f"   {kind:6s} {g['BLOCK_M']}x{g['BLOCK_N']}x{g['BLOCK_K']} st{g['num_stages']} w{g['num_warps']} "
              f"c{g['consumers']}{'r' if g['consumer_split'] == 'rows' else ''} sk{g['split_k']}: "
              f"{entry['status'][:120]} {entry.get('vs_cublas', 0):.3f}",
              file=sys.stderr, flush=True)
        entries.append(entry)
    ranked = {k: sorted((e for e in entries if "ms" in e and e["kind"] == k), key=lambda e: e["ms"])
              for k in ("gluon", "triton")}
    final = {"cublas": cublas}
    for kind, best in ranked.items():
        for i, e in enumerate(best[:3 if kind == "gluon" else 1]):
            final[f"{kind}{i}"] = modules[e["hash"]]
    timings = time_interleaved(list(final.values()), reps=50)
    base = timings[0].median_ms
    return {"problem": problem.key, "gpu": torch.cuda.get_device_name(),
            "final_ms": {k: t.median_ms for k, t in zip(final, timings, strict=True)},
            "final_tflops": {k: round(tflops(t.median_ms), 1) for k, t in zip(final, timings, strict=True)},
            "final_vs_cublas": {k: round(base / t.median_ms, 3) for k, t in zip(final, timings, strict=True)},
            "best": {k: v[:3] for k, v in ranked.items()}, "tried": len(entries),
            "wrong": [e for e in entries if e["status"] not in ("ok",)], "rows": entries}


def main(argv: list[str]) -> int:
    import os

    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    out = Path(os.environ.get("EVO_OUT") or "/tmp")
    out.mkdir(parents=True, exist_ok=True)
    results = []
    consumers = tuple(int(a.split("=")[1]) for a in argv if a.startswith("--consumers=")) or (1, 2)
    splits = next((tuple(int(x) for x in a.split("=")[1].split(",")) for a in argv if a.startswith("--split=")), (1,))
    jobs = next((int(a.split("=")[1]) for a in argv if a.startswith("--jobs=")), min(16, os.cpu_count() or 1))
    for spec in [a for a in argv if not a.startswith("--")] or DEFAULT_SHAPES:
        results.append(probe(spec, consumers, splits, jobs, rows="--rows" in argv))
        (out / "probe_gluon.json").write_text(json.dumps(results, indent=1))
    for r in results:
        print(f"{r['problem']:28s} " + "  ".join(f"{k}={v:.3f}" for k, v in r["final_vs_cublas"].items())
              + f"  (TFLOP/s {r['final_tflops']}; {len(r['wrong'])} of {r['tried']} not ok)")
        for kind, best in r["best"].items():
            if best:
                g = best[0]["genome"]
                print(f"   best {kind}: {g['BLOCK_M']}x{g['BLOCK_N']}x{g['BLOCK_K']} st{g['num_stages']} "
                      f"w{g['num_warps']} c{g['consumers']} {g['consumer_split']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
