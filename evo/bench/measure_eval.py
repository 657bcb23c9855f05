"""Measure the evaluator on a GPU: throughput with compilation overlapped, GPU busy share, repeatability.

    python -m evo.bench.measure_eval [--count 300] [--shape 4096x4096x4096] [--dtype bf16] [--compile-workers N]

1. Throughput: `count` distinct GEMM candidates (the family's seeds, then random valid genomes) are
   compiled by a pool of CPU workers ahead of one GPU worker, which checks and times each as soon as it is
   compiled. Reported: candidates per GPU-minute (the GPU worker's wall time from its first evaluation to
   its last; goal >= 300), and the share of that time the GPU child spent checking and timing.
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
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "make_candidates", "throughput", "repeatability"]

GOAL_PER_MINUTE = 300.0
GOAL_REPEAT = 0.03


def make_candidates(operator: Any, problem: Any, target: Any, count: int, seed: int) -> list[Any]:
    """`count` candidates with distinct sources: the family's seeds first, then random valid genomes."""
    from evo.evaluate.candidate import make_candidate

    rng = np.random.default_rng(seed)
    out, seen, tries = [], set(), 0
    genomes = iter(operator.family.seeds(problem, target))
    while len(out) < count and tries < 50 * count:
        tries += 1
        genome = next(genomes, None) or operator.family.random(rng, problem, target)
        try:
            cand = make_candidate(operator, genome, problem, target, origin="measure")
        except ValueError:
            continue
        if cand.source_hash not in seen:
            seen.add(cand.source_hash)
            out.append(cand)
    return out


def throughput(candidates: list[Any], worker: Any, pool: Any, store: Any, timeout_s: float) -> dict[str, Any]:
    from evo.evaluate.candidate import Prepared
    from evo.evaluate.evaluator import Evaluator

    evaluator = Evaluator(worker, store, timeout_s=timeout_s, remeasure=True)
    futures = {pool.submit(c): c for c in candidates}
    statuses: dict[str, int] = {}
    gpu_busy = check_s = time_s = load_s = 0.0
    hits = measured = 0
    first = last = None
    for fut in as_completed(futures):
        prepared = Prepared(futures[fut], fut.result())
        t0 = time.perf_counter()
        first = t0 if first is None else first
        ev = evaluator.evaluate(prepared)
        last = time.perf_counter()
        statuses[ev.status] = statuses.get(ev.status, 0) + 1
        phases = ev.resources.get("eval", {}) if isinstance(ev.resources, dict) else {}
        if prepared.ready:
            measured += 1
            hits += bool(ev.resources.get("cache_hit"))
            check_s += phases.get("check_s", 0.0)
            time_s += phases.get("time_s", 0.0)
            load_s += phases.get("load_s", 0.0)
            gpu_busy += last - t0
    wall = (last - first) if first is not None and last is not None else 0.0
    return {
        "candidates": len(candidates), "statuses": statuses, "gpu_evaluated": measured,
        "gpu_wall_s": wall, "per_gpu_minute": len(candidates) / wall * 60 if wall else 0.0,
        "gpu_evaluated_per_gpu_minute": measured / wall * 60 if wall else 0.0,
        "check_s": check_s, "time_s": time_s, "load_s": load_s,
        "busy_share": (check_s + time_s) / wall if wall else 0.0,
        "worker_busy_share": gpu_busy / wall if wall else 0.0,
        "cache_hit_share": hits / measured if measured else 0.0,
        "worker_restarts": worker.restarts, "compile_restarts": pool.restarts,
    }


def repeatability(candidate: Any, pool: Any, cache_dir: str, reps: int, timeout_s: float) -> dict[str, Any]:
    from evo.evaluate.candidate import Prepared
    from evo.evaluate.worker import EvalSettings, GpuWorker

    prepared = Prepared(candidate, pool.compile(candidate))
    runs = []
    for i in range(2):  # two fresh processes, one after the other
        with GpuWorker(0, settings=EvalSettings(reps=reps, budget_ms=2000), seed=100 + i, cache_dir=cache_dir) as w:
            ev = w.evaluate(prepared, timeout_s)
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
    ap = argparse.ArgumentParser(prog="python -m evo.bench.measure_eval", description=__doc__.split("\n\n")[0])
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
    from evo.evaluate.compile_pool import CompilePool
    from evo.evaluate.worker import EvalSettings, GpuWorker
    from evo.problem import Problem
    from evo.store.sqlite import Store

    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="evo-measure-cache-")
    op = operators.get(args.operator)
    problem = op.problem(Problem.parse_shape(args.shape), args.dtype)
    store_path = (out_dir or Path(tempfile.mkdtemp(prefix="evo-measure-"))) / "measure_eval.db"
    started = time.time()
    worker = GpuWorker(0, settings=EvalSettings(reps=args.reps), seed=args.seed, cache_dir=cache_dir)
    worker.start()  # its CUDA start-up overlaps the compile pool's
    gpu, versions, target = worker.gpu, worker.versions, _target_of(worker)
    pool = CompilePool(args.compile_workers, timeout_s=args.timeout * 2, cache_dir=cache_dir, target=target)
    try:
        candidates = make_candidates(op, problem, pool.target, args.count, args.seed)
        with Store(store_path) as store:
            tp = throughput(candidates, worker, pool, store, args.timeout)
        worker.close()
        rep = repeatability(candidates[0], pool, cache_dir, args.repeat_reps, args.timeout)
    finally:
        pool.close()
        worker.close()
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


def _target_of(worker: Any) -> Any:
    target = worker.info.get("target")
    if target is None:
        from evo.problem import HOPPER

        return HOPPER
    return target


if __name__ == "__main__":
    sys.exit(main())
