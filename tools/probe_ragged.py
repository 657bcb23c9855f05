"""GPU probe: what cuBLAS and torch.compile max-autotune run on awkward GEMM shapes, and how evo's genes fare.

For each shape (bf16 unless given), in one process on one GPU:
1. the kernels each rival launches (names and durations from torch.profiler: cuBLAS's kernel name carries its
   tile shape; a padding or copy kernel before Inductor's matmul shows that it padded an operand);
2. torch.compile(mode="max-autotune-no-cudagraphs") with caches off, so that its autotuning table (every
   template and configuration it timed, and the winner) goes to stderr;
3. a list of evo genomes timed interleaved with cuBLAS and torch.compile on the same inputs, each checked
   first on a NaN-poisoned output.

    python tools/probe_ragged.py [--sweep] [--no-compile] [MxNxK[:dtype] ...]   # writes $EVO_OUT/probe_ragged.json

`--sweep` adds every valid genome of a grid over tiles, stages, warps, memory path and grid for the first
shape: does the space hold a better kernel than the search found? `--no-compile` leaves torch.compile out.
"""

from __future__ import annotations

import itertools
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

DEFAULT_SHAPES = ["3000x3000x3000", "1000x3000x2000", "1536x3001x5120", "2048x50257x768", "64x5760x2880",
                  "768x768x49152"]
# genomes over GemmFamily.base(); each is repaired for the shape (repair keeps what the shape allows)
GENOMES = [
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, persistent=True,
         memory="host_descriptor", epilogue_subtile=True),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, memory="host_descriptor"),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, GROUP_M=8),
    # wide tiles: 128 + 64 columns
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=3, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor", persistent=True),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=4, memory="descriptor"),
    dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=4, GROUP_M=8),
    dict(BLOCK_M=64, BLOCK_N=192, BLOCK_K=64, num_warps=4, num_stages=4, memory="host_descriptor"),
    # stream-K: every tile of a grid smaller than the SMs, or of its last partial wave, shared by K steps
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, memory="host_descriptor", persistent=True,
         stream_k=True),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, memory="host_descriptor", persistent=True,
         stream_k=True),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=4, memory="host_descriptor", persistent=True,
         stream_k=True),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, memory="host_descriptor", persistent=True,
         stream_k=True),
    # split-K for a small M x N with a long K
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, split_k=4, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, split_k=8, memory="host_descriptor"),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, split_k=16, memory="host_descriptor"),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, num_warps=4, num_stages=4, split_k=2, memory="host_descriptor"),
    dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4, split_k=4, memory="host_descriptor"),
    # splits that are not powers of two: tiles x splits near a whole number of waves
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, split_k=3, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, split_k=6, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=4, split_k=12, memory="host_descriptor"),
    dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3, split_k=3, memory="host_descriptor"),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, split_k=3, memory="host_descriptor"),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, split_k=6, memory="host_descriptor"),
]


def _out_dir() -> Path:
    path = Path(os.environ.get("EVO_OUT") or "/tmp")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _kernels(fn: Any, runs: int = 3) -> list[dict[str, Any]]:
    """Names and mean durations (us) of the GPU kernels `fn` launches."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    out = []
    for ev in prof.key_averages():
        if ev.device_time_total > 0 and ev.count:
            out.append({"name": ev.key[:160], "count": ev.count,
                        "mean_us": round(ev.device_time_total / ev.count, 2)})
    return out


def _check(op: Any, fn: Any, problem: Any) -> tuple[str, float]:
    import torch

    a, b = op.make_inputs(problem, 7, device="cuda")
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), device="cuda", dtype=a.dtype)
    fn(a, b, out=out)
    torch.cuda.synchronize()
    if torch.isnan(out).any():
        return "unwritten", float("inf")
    ref = op.reference(a, b)
    err = float((out.float() - ref).norm() / ref.norm())
    return ("ok" if err <= op.tolerance(problem) else "wrong"), err


def _sweep_genomes(op: Any, problem: Any, target: Any) -> list[dict[str, Any]]:
    grid = itertools.product((64, 128, 256), (64, 128, 256), (64,), (3, 4, 5), (4, 8), ("host_descriptor",),
                             (False, True))
    out = []
    for bm, bn, bk, st, w, mem, pers in grid:
        values = {**op.family.base(), "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_stages": st,
                  "num_warps": w, "memory": mem, "persistent": pers}
        if not op.family.violations(op.family.make(values), problem, target):
            out.append(values)
    return out


def probe(spec: str, sweep: bool, with_compile: bool = True) -> dict[str, Any]:
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target

    shape_text, _, dtype = spec.partition(":")
    shape = tuple(int(x) for x in shape_text.split("x"))
    op, target = operators.get("gemm"), Target.from_torch()
    problem = op.problem(shape, dtype or "bf16")
    a, b = op.make_inputs(problem, 0, device="cuda")
    row: dict[str, Any] = {"problem": problem.key, "gpu": torch.cuda.get_device_name()}
    cublas = lambda: torch.matmul(a, b)  # noqa: E731
    row["cublas_kernels"] = _kernels(cublas)
    print(f"== {problem.key}", file=sys.stderr, flush=True)
    fns = {"cublas": cublas}
    row["compile_s"], row["compile_kernels"] = 0.0, []
    if with_compile:
        compiled = torch.compile(lambda x, y: torch.matmul(x, y), mode="max-autotune-no-cudagraphs", dynamic=False,
                                 fullgraph=True)
        t0 = time.perf_counter()
        compiled(a, b)
        torch.cuda.synchronize()
        row["compile_s"] = round(time.perf_counter() - t0, 1)
        row["compile_kernels"] = _kernels(lambda: compiled(a, b))
        fns["torch_compile"] = lambda: compiled(a, b)
    genomes = [{**op.family.base(), **g} for g in GENOMES]
    if sweep:
        genomes += _sweep_genomes(op, problem, target)
    seen, evo_rows = set(), []
    import numpy as np

    rng = np.random.default_rng(0)
    for values in genomes:
        try:
            genome = op.family.repair(op.family.make(values), problem, target, rng)
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            evo_rows.append({"genome": values, "status": f"repair: {exc}"[:200]})
            continue
        if genome.hash in seen:
            continue
        seen.add(genome.hash)
        entry: dict[str, Any] = {"genome": genome.as_dict()}
        try:
            module = load_source(op.render(genome, problem, target))
            entry["status"], entry["err"] = _check(op, module.matmul, problem)
        except Exception as exc:  # noqa: BLE001
            entry["status"] = f"error: {type(exc).__name__}: {exc}"[:300]
        if entry["status"] == "ok":
            out = torch.empty((a.shape[0], b.shape[1]), device="cuda", dtype=a.dtype)
            timings = time_interleaved([cublas, lambda m=module, o=out: m.matmul(a, b, out=o)], reps=20)
            entry["ms"], entry["vs_cublas"] = timings[1].median_ms, timings[0].median_ms / timings[1].median_ms
        evo_rows.append(entry)
    ranked = sorted((e for e in evo_rows if "ms" in e), key=lambda e: e["ms"])
    best = ranked[:3]
    for i, e in enumerate(best):
        module = load_source(op.render(op.family.make(e["genome"]), problem, target))
        out = torch.empty((a.shape[0], b.shape[1]), device="cuda", dtype=a.dtype)
        fns[f"evo_best{i}"] = lambda m=module, o=out: m.matmul(a, b, out=o)
    timings = time_interleaved(list(fns.values()), reps=50)
    base = timings[0].median_ms
    row["final_ms"] = {k: t.median_ms for k, t in zip(fns, timings, strict=True)}
    row["final_vs_cublas"] = {k: round(base / t.median_ms, 3) for k, t in zip(fns, timings, strict=True)}
    row["evo_best"] = best
    row["evo_tried"] = len(evo_rows)
    row["evo_rows"] = evo_rows if not sweep else ranked[:40] + [e for e in evo_rows if "ms" not in e][:20]
    return row


def main(argv: list[str]) -> int:
    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sweep = "--sweep" in argv
    specs = [a for a in argv if not a.startswith("--")] or DEFAULT_SHAPES
    rows = []
    for i, spec in enumerate(specs):
        rows.append(probe(spec, sweep and i == 0, "--no-compile" not in argv))
        (_out_dir() / "probe_ragged.json").write_text(json.dumps(rows, indent=1))
        r = rows[-1]
        print(f"{r['problem']:28s} compile {r['compile_s']:5.1f}s  "
              + "  ".join(f"{k}={v:.2f}" for k, v in r["final_vs_cublas"].items()), flush=True)
        print("   cublas:", [k["name"][:90] for k in r["cublas_kernels"]], flush=True)
        print("   compile:", [(k["name"][:70], k["mean_us"]) for k in r["compile_kernels"]], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
