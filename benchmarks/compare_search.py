"""MAP-Elites against random search and an exhaustive grid, on GEMM bf16, on one GPU (a GPU script).

    python -m benchmarks.compare_search [--shapes 4096x4096x4096 128x4096x14336] [--seeds 0 1 2] [--store PATH]

The genome space is restricted (SPACE) to a few hundred valid genomes per shape. First every valid genome
is measured once through the real evaluator (compile ahead on CPUs, check and time against cuBLAS on the
GPU) into one store: that is the grid, and its best is the reference. Then MAP-Elites runs, as `evo run`
runs it (the family's seeds, a few random genomes, then variation), for several seeds, in the same store:
every genome it proposes renders to a source the grid measured, so it is served by the store's lookup and
costs no GPU time. Random search is sampling the grid's genomes uniformly without replacement; its count
is computed from the grid's measurements (the expectation (G+1)/(k+1) for k genomes at or above the mark,
and the median over 1000 seeded orders). The figure compared is therefore the number of EVALUATIONS
each method needs to reach 99% of the grid's best (goal: MAP-Elites within 20% of the grid's size); all
methods see the same measurement of a kernel, so timing noise does not favour any of them. The best
kernel's ratio to cuBLAS comes from one evaluation, where both were timed interleaved in one process.

A short table is printed last; with $OUT set, the JSON and the store are written there.
Sized to finish in about 8 minutes on one H100 (about 500 GPU evaluations).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SPACE", "main", "measure_all", "random_search_counts"]

# Tiles, warps, stages, persistence and the memory path vary; the rest is pinned (432 raw genomes).
SPACE: dict[str, list[Any]] = {
    "BLOCK_M": [64, 128, 256], "BLOCK_N": [64, 128, 256], "BLOCK_K": [32, 64, 128], "num_warps": [4, 8],
    "num_stages": [3, 4], "GROUP_M": [8], "raster": ["row"], "loop_stages": [0], "loop_unroll": [1],
    "warp_specialize": [False], "persistent": [False, True], "memory": ["pointer", "descriptor"], "split_k": [1],
    "epilogue_subtile": [False],
}
SHAPES = ("4096x4096x4096", "128x4096x14336")
MARK = 0.99  # fraction of the grid's best a method must reach
GOAL = 0.20  # MAP-Elites should get there within this fraction of the grid's evaluations


def log(text: str) -> None:
    print(f"[compare {time.strftime('%H:%M:%S')}] {text}", flush=True)


def measure_all(executor: Any, store: Any, op: Any, problem: Any, genomes: list[Any], run_id: str) -> list[Any]:
    """Evaluate every genome once (served from the store when its source was measured before)."""
    from evo.evaluate import Candidate

    jobs = deque(Candidate(problem, g, op, "grid", ticket=i) for i, g in enumerate(genomes, start=1))
    rows = []
    t0 = time.monotonic()
    while jobs or executor.in_flight:
        while jobs and executor.in_flight < executor.slots:
            executor.submit(jobs.popleft())
        for _job, ev in executor.poll(timeout_s=1.0):
            ev.origin, ev.parents, ev.run_id = "grid", [], run_id
            store.add(ev)
            rows.append(ev)
            if len(rows) % 25 == 0:
                log(f"{problem.key}: grid {len(rows)}/{len(genomes)} ({time.monotonic() - t0:.0f} s)")
    return rows


def random_search_counts(values: list[float | None], threshold: float, seed: int = 0,
                         orders: int = 1000) -> tuple[float | None, float | None]:
    """(expected, median) evaluations for uniform sampling without replacement to first reach `threshold`."""
    good = np.array([v is not None and v >= threshold for v in values])
    g, k = len(values), int(good.sum())
    if k == 0:
        return None, None
    rng = np.random.default_rng(seed)
    firsts = [int(np.argmax(good[rng.permutation(g)])) + 1 for _ in range(orders)]
    return (g + 1) / (k + 1), float(np.median(firsts))


def run_mapelites(op: Any, problem: Any, store: Any, executor: Any, seed: int, budget: int,
                  space: dict[str, list[Any]]) -> tuple[Any, list[Any]]:
    from evo.experiment.spec import Budget, EmitterSpec, ExecutorSpec, Experiment
    from evo.search.loop import Search

    name = f"mapelites-{problem.shape_text}-s{seed}"
    # classic MAP-Elites (the mutation and crossover mix alone): what this comparison has always measured
    exp = Experiment(name=name, operator=op.name, problems=(problem,), genome=space,
                     budget=Budget(evaluations=budget), initial_random=8, transfer=False, seed=seed,
                     executor=ExecutorSpec(kind="ray", gpus=1), emitters=(EmitterSpec("variation"),))
    search = Search(exp, op, store, executor, run_id=f"{name}#1")
    search.run()
    return search.archives[problem.key], [r for r in store.iter(problem.key) if r.run_id == f"{name}#1"]


def compare_problem(op: Any, problem: Any, store: Any, executor: Any, seeds: list[int], budget_fraction: float,
                    space: dict[str, list[Any]]) -> dict[str, Any]:
    """Grid, then MAP-Elites per seed, then random search's counts, for one problem (see the module doc)."""
    from evo.archive import throughput_of

    t0 = time.monotonic()
    genomes = op.family.enumerate(problem, executor.target)
    log(f"{problem.key}: grid of {len(genomes)} valid genomes")
    rows = measure_all(executor, store, op, problem, genomes, run_id=f"grid-{problem.shape_text}#1")
    throughput = throughput_of(op, problem)
    values = [throughput(r) for r in rows]
    ok = [(v, r) for v, r in zip(values, rows, strict=True) if v is not None]
    if not ok:
        raise RuntimeError(f"{problem.key}: no genome of the grid passed the check")
    best_value, best_row = max(ok, key=lambda t: t[0])
    threshold = MARK * best_value
    expected, median = random_search_counts(values, threshold)
    budget = max(16, int(round(budget_fraction * len(genomes))))
    me = []
    for seed in seeds:
        archive, me_rows = run_mapelites(op, problem, store, executor, seed, budget, space)
        measured = sum(not r.worker.startswith("store#") for r in me_rows)
        final = archive.best
        me.append({"seed": seed, "evaluations_to_mark": archive.history.first_reaching(threshold),
                   "budget": budget, "final_best": final.throughput if final else None,
                   "final_ratio": final.ratio if final else None, "final_genome": final.genome if final else None,
                   "measured_on_gpu": measured, "served_from_store": len(me_rows) - measured,
                   "coverage": archive.coverage})
        log(f"{problem.key}: MAP-Elites seed {seed}: {me[-1]['evaluations_to_mark']} evaluations to {MARK:.0%}")
    return {
        "problem": problem.key, "grid_size": len(genomes), "grid_ok": len(ok),
        "grid_failures": {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows}) if s != "ok"},
        "grid_best": best_value, "grid_best_genome": best_row.genome, "grid_best_ratio": best_row.ratio,
        "cublas": op.throughput(problem, best_row.baseline_ms) if best_row.baseline_ms else None,
        "gpu": best_row.gpu, "mark": threshold,
        "at_or_above_mark": sum(v is not None and v >= threshold for v in values),
        "random_expected": expected, "random_median": median, "mapelites": me,
        "goal_evaluations": GOAL * len(genomes), "elapsed_s": time.monotonic() - t0,
    }


def table(results: list[dict[str, Any]]) -> str:
    """Evaluations each method needed to reach 99% of the grid's best, and that best against cuBLAS."""
    rows = [("problem", "grid", "best TF/s", "x cuBLAS", "cuBLAS TF/s", "MAP-Elites (per seed)",
             "random exp/med", "goal")]
    for r in results:
        me = " ".join("-" if m["evaluations_to_mark"] is None else str(m["evaluations_to_mark"])
                      for m in r["mapelites"])
        rows.append((r["problem"], str(r["grid_size"]), f"{r['grid_best']:.1f}",
                     f"{r['grid_best_ratio']:.3f}" if r["grid_best_ratio"] else "-",
                     f"{r['cublas']:.1f}" if r["cublas"] else "-", me,
                     "-" if r["random_expected"] is None else f"{r['random_expected']:.0f}/{r['random_median']:.0f}",
                     f"<={r['goal_evaluations']:.0f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return f"evaluations to reach {MARK:.0%} of the grid's best:\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.compare_search", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget-fraction", type=float, default=0.4,
                        help="MAP-Elites evaluations per seed, as a fraction of the grid's size")
    parser.add_argument("--store", help="store to use (default: $OUT/compare_search.sqlite or a temp dir)")
    parser.add_argument("--compile-workers", type=int, default=None)
    parser.add_argument("--smoke", action="store_true",
                        help="CPU dry run of this script through the smoke evaluator: its 'TF/s' are a model "
                             "estimate, NOT timings")
    args = parser.parse_args(argv)
    if not 0 < args.budget_fraction <= 1:
        parser.error("--budget-fraction must be in (0, 1]")

    import operators
    from evo.evaluate import GpuBackend, SmokeBackend
    from evo.evaluate.ray_executor import RayExecutor
    from evo.experiment.spec import EvaluationSpec, ExecutorSpec
    from evo.problem import Problem
    from evo.store.sqlite import Store

    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    store_path = Path(args.store) if args.store else (out or Path(tempfile.mkdtemp())) / "compare_search.sqlite"
    op = operators.get("gemm", SPACE)
    problems = [op.problem(Problem.parse_shape(s), "bf16") for s in args.shapes]
    t0 = time.monotonic()
    results: list[dict[str, Any]] = []
    with Store(store_path) as store:
        spec = ExecutorSpec(kind="smoke" if args.smoke else "ray", gpus=1, compile_workers=args.compile_workers)
        backend = (SmokeBackend if args.smoke else GpuBackend)(EvaluationSpec())
        executor = RayExecutor(backend, spec, EvaluationSpec(), lookup=store.lookup)
        executor.start()
        try:
            log(f"workers: {[i.gpu for i in executor.infos]}; target {executor.target}; store {store_path}")
            for problem in problems:
                results.append(compare_problem(op, problem, store, executor, args.seeds, args.budget_fraction, SPACE))
                doc = {"space": SPACE, "mark": MARK, "goal": GOAL, "versions": executor.infos[0].versions,
                       "smoke": args.smoke,
                       "elapsed_s": time.monotonic() - t0, "results": results}
                if out is not None:  # after every problem: a later failure keeps what was measured
                    (out / "compare_search.json").write_text(json.dumps(doc, indent=1, default=str))
        finally:
            executor.shutdown()
    log(f"done in {time.monotonic() - t0:.0f} s")
    if args.smoke:
        print("SMOKE DRY RUN: every 'TF/s' below is a model estimate on a CPU interpreter, NOT a timing")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
