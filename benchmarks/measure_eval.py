"""Measure the evaluator on a GPU: throughput with compilation overlapped, GPU busy share, repeatability.

    python -m benchmarks.measure_eval [--count 300] [--shape 4096x4096x4096] [--dtype bf16] [--compile-workers N]

1. Throughput: `count` distinct GEMM candidates (the family's seeds, then random valid genomes) are
   compiled on CPU tasks ahead of one GPU worker (the search's Ray executor and pipeline stages), which checks
   and times each as soon as it is compiled. Reported: candidates per GPU-minute (the GPU worker's wall time
   from its first evaluation to its last; goal >= 300), and the share of that time the GPU child spent
   checking and timing.
2. Repeatability: one kernel (the first seed) timed in two fresh worker processes; goal: medians within 3%.

Prints a short table last; writes measure_eval.json (and the evaluation store) to $OUT when it is set.
Operator-agnostic apart from the default operator name: `--operator` takes any registered operator.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "make_candidates", "throughput", "repeatability"]

GOAL_PER_MINUTE = 300.0
GOAL_REPEAT = 0.03


def make_candidates(operator: Any, problem: Any, target: Any, count: int, seed: int) -> list[Any]:
    """`count` rendered candidates with distinct sources: the family's seeds first, then random valid genomes."""
    from evo.evaluate import make_candidate

    rng = np.random.default_rng(seed)
    out, seen, tries = [], set(), 0
    genomes = iter(operator.family.seeds(problem, target))
    while len(out) < count and tries < 50 * count:
        tries += 1
        genome = next(genomes, None) or operator.family.random(rng, problem, target)
        try:
            cand = make_candidate(operator, genome, problem, target, origin="measure", ticket=len(out) + 1)
        except ValueError:
            continue
        if cand.source_hash not in seen:
            seen.add(cand.source_hash)
            out.append(cand)
    return out


def throughput(candidates: list[Any], executor: Any, store: Any) -> dict[str, Any]:
    """Every candidate through the executor's stages (compile ahead, then check and time); rows stored as
    they come, as the search does. GPU wall time: from the first evaluation a worker started to the last."""
    for cand in candidates:
        executor.submit(cand)
    rows, measured = [], []
    while executor.in_flight:
        for cand, ev in executor.poll(timeout_s=1.0):
            store.add(ev)
            rows.append(ev)
            if cand.ready:  # rendered and compiled fine: a worker checked (and timed) it
                measured.append(ev)
    statuses: dict[str, int] = {}
    for ev in rows:
        statuses[ev.status] = statuses.get(ev.status, 0) + 1
    phases = [ev.resources.get("eval", {}) for ev in measured]
    wall = max(ev.finished_at for ev in measured) - min(ev.started_at for ev in measured) if measured else 0.0
    busy = sum(ev.finished_at - ev.started_at for ev in measured)
    check_s, time_s = sum(p.get("check_s", 0.0) for p in phases), sum(p.get("time_s", 0.0) for p in phases)
    hits = sum(bool(ev.resources.get("cache_hit")) for ev in measured)
    return {
        "candidates": len(candidates), "statuses": statuses, "gpu_evaluated": len(measured),
        "gpu_wall_s": wall, "per_gpu_minute": len(candidates) / wall * 60 if wall else 0.0,
        "gpu_evaluated_per_gpu_minute": len(measured) / wall * 60 if wall else 0.0,
        "check_s": check_s, "time_s": time_s, "load_s": sum(p.get("load_s", 0.0) for p in phases),
        "busy_share": (check_s + time_s) / wall if wall else 0.0,
        "worker_busy_share": busy / wall if wall else 0.0,
        "cache_hit_share": hits / len(measured) if measured else 0.0,
    }


def repeatability(candidate: Any, backend: Any, target: Any, reps: int, timeout_s: float) -> dict[str, Any]:
    """One kernel compiled once, then checked and timed in two fresh GPU worker processes, one after the other."""
    from evo.evaluate import CompileChild, pipeline
    from evo.evaluate.worker import GpuWorker
    from evo.experiment.spec import EvaluationSpec

    with CompileChild(backend, target, timeout_s * 2) as compiler:
        failed = pipeline.compiled(candidate, compiler.compile(candidate))
    runs = []
    for i in range(2):
        with GpuWorker(0, settings=EvaluationSpec(reps=reps, budget_ms=2000), seed=100 + i,
                       cache_dir=backend.cache_dir) as w:
            ev = failed or pipeline.measure(w, candidate, timeout_s)
        runs.append({"status": ev.status, "median_ms": ev.median_ms, "spread_ms": ev.spread_ms,
                     "baseline_ms": ev.baseline_ms, "reason": ev.reason})
    a, b = runs[0]["median_ms"], runs[1]["median_ms"]
    diff = abs(a - b) / min(a, b) if a and b else None
    base = [r["baseline_ms"] for r in runs]
    base_diff = abs(base[0] - base[1]) / min(base) if all(base) else None
    return {"genome": candidate.genome.canonical(), "runs": runs, "rel_diff": diff, "baseline_rel_diff": base_diff}


def _table(rows: list[tuple[str, str, str, str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.measure_eval", description=__doc__.split("\n\n")[0])
    ap.add_argument("--operator", default="gemm")
    ap.add_argument("--shape", default="4096x4096x4096")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--compile-workers", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--repeat-reps", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=None, help="Triton cache (default: a fresh one, so compiles are real)")
    args = ap.parse_args(argv)
    if args.count < 1:
        ap.error("--count must be >= 1")

    import operators
    from evo.evaluate import GpuBackend
    from evo.evaluate.ray_executor import RayExecutor
    from evo.experiment.spec import EvaluationSpec, ExecutorSpec
    from evo.problem import Problem
    from evo.store.sqlite import Store

    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="evo-measure-cache-")
    op = operators.get(args.operator)
    problem = op.problem(Problem.parse_shape(args.shape), args.dtype)
    store_path = (out_dir or Path(tempfile.mkdtemp(prefix="evo-measure-"))) / "measure_eval.db"
    started = time.time()
    evaluation = EvaluationSpec(reps=args.reps, timeout_s=args.timeout, compile_timeout_s=args.timeout * 2)
    backend = GpuBackend(evaluation, seed=args.seed, cache_dir=cache_dir)
    # the search's own executor: compiles on CPU tasks ahead of one GPU worker
    spec = ExecutorSpec(kind="ray", gpus=1, compile_workers=args.compile_workers)
    with RayExecutor(backend, spec, evaluation) as executor:
        info = executor.infos[0]
        gpu, versions, target = info.gpu, info.versions, executor.target
        candidates = make_candidates(op, problem, target, args.count, args.seed)
        with Store(store_path) as store:
            tp = throughput(candidates, executor, store)
    first = make_candidates(op, problem, target, 1, args.seed)[0]
    rep = repeatability(first, backend, target, args.repeat_reps, args.timeout)
    result = {"problem": problem.key, "gpu": gpu, "versions": versions,
              "compile_workers": args.compile_workers, "throughput": tp, "repeatability": rep,
              "wall_s": time.time() - started, "store": str(store_path)}
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "measure_eval.json").write_text(json.dumps(result, indent=2, default=str))
    rd = rep["rel_diff"]
    rows = [("metric", "value", "goal", "ok"),
            ("candidates / GPU-minute", f"{tp['per_gpu_minute']:.0f}", f">= {GOAL_PER_MINUTE:.0f}",
             "yes" if tp["per_gpu_minute"] >= GOAL_PER_MINUTE else "NO"),
            ("  of them run on the GPU / minute", f"{tp['gpu_evaluated_per_gpu_minute']:.0f}", "", ""),
            ("GPU check+timing share of wall", f"{tp['busy_share']:.0%}", "", ""),
            ("worker busy share of wall", f"{tp['worker_busy_share']:.0%}", "", ""),
            ("first launches from CPU cache", f"{tp['cache_hit_share']:.0%}", "100%", ""),
            ("repeat: median diff, 2 processes", "n/a" if rd is None else f"{rd:.2%}", f"<= {GOAL_REPEAT:.0%}",
             "yes" if rd is not None and rd <= GOAL_REPEAT else "NO"),
            ("statuses", " ".join(f"{k}={v}" for k, v in sorted(tp["statuses"].items())), "", "")]
    print(f"\n{problem.key} on {gpu} ({json.dumps(versions)}), "
          f"{args.compile_workers} compile workers, {len(candidates)} candidates")
    print(_table(rows))
    return 0



if __name__ == "__main__":
    sys.exit(main())
