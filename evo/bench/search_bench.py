"""`evo bench-search`: how fast each search method gets to a good kernel, on the same problems and executor.

Every method searches each problem of an experiment from scratch, on an executor of its own with a Triton
compile cache of its own (started and warmed up before its clock starts; nothing served from any store: each
method compiles and measures its own kernels):

- `evo`: the experiment's emitters (by default the bandit over variation, guided, exploit and restart);
- `evo-no-surrogate`: the same without the surrogate-guided emitter;
- `evo-classic`: the mutation and crossover mix alone (evo before emitters: classic MAP-Elites);
- `random`: random restarts only, without the family's hand-picked seeds;
- `evo-rerun`: `evo` once more with the results database `evo` just filled (memory across runs).

A method's trace is its best fitness against evaluations and wall seconds since it started. Then, on a GPU only,
the best kernel of each method and the alternatives (`torch_compile` max-autotune, Helion at effort "full"
when importable) are checked and timed side by side (evo.bench.measure); an alternative's setup time is its
tuning time, paid cold: each problem's alternatives get Triton, Inductor and Helion caches of their own (a
Helion cache hit would skip its tuning). Results: `<out>/search-<gpu slug>.json`, `.md` and `.html` (the
convergence plots; evo.bench.search_results), written once the searches end (alternatives pending) and again
after each problem's alternatives, so a run stopped during a long tuning keeps its searches. On a smoke
executor the fitness is NOT a timing and every file says so.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from evo.bench import helion_progress
from evo.bench.search_results import merge_search_docs, reach, search_report_path, write_search_report
from evo.experiment.spec import Budget, EmitterSpec, Experiment, MemorySpec
from evo.problem import Problem

__all__ = ["METHODS", "method_experiment", "trace", "reach", "bench_search", "fresh_caches",
           "add_bench_search_command"]

METHODS = ("evo", "evo-no-surrogate", "evo-classic", "random", "evo-rerun")
MARK = 0.99  # a method "reaches" a problem when its best is within 1% of the best any method found
# where Triton, Inductor (torch.compile, its autotuning results too) and Helion (its tuned configurations) keep
# what they compiled and chose
CACHE_VARIABLES = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor", "HELION_CACHE_DIR": "helion"}
PENDING = "pending: the run stopped before their side-by-side timing"
HELION_LOG = "helion-autotune"  # under a problem's alternatives root: Helion's tuning log (.csv rows, .log text)


def method_experiment(exp: Experiment, method: str, problem: Problem, memory_db: Path) -> Experiment:
    """The single-problem experiment a method runs (no transfer; the shared database only for evo's pair)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known: {', '.join(METHODS)}")
    base = dataclasses.replace(exp, name=f"{exp.name}-{method}", problems=(problem,), transfer=False,
                               memory=MemorySpec(enabled=False))
    if method in ("evo", "evo-rerun"):
        return dataclasses.replace(base, memory=MemorySpec(db=str(memory_db), seed=8))
    if method == "evo-no-surrogate":
        blind = tuple(e for e in exp.emitters if e.name != "guided") or (EmitterSpec("variation"),)
        return dataclasses.replace(base, emitters=blind)
    if method == "evo-classic":
        return dataclasses.replace(base, emitters=(EmitterSpec("variation"),))
    return dataclasses.replace(base, emitters=(EmitterSpec("restart"),), seeds=False)


def trace(rows: list[Any], operator: Any, problem: Problem, t0: float) -> list[list[float]]:
    """[seconds since t0, evaluations, best fitness so far] at every evaluation that raised the best."""
    out: list[list[float]] = []
    best = None
    for n, ev in enumerate(rows, start=1):
        if ev.status == "ok" and ev.median_ms and ev.median_ms > 0:
            value = float(operator.throughput(problem, ev.median_ms))
            if best is None or value > best:
                best = value
                out.append([round(max(0.0, ev.finished_at - t0), 3), n, value])
    return out


def _search(exp: Experiment, executor: Any, run_dir: Path) -> tuple[list[Any], float, float]:
    from evo.search.run import run_experiment
    from evo.store.sqlite import Store

    executor.lookup = None  # a method measures its own kernels (evo-rerun's database is chained in by the run)
    t0 = time.time()
    run_experiment(exp, run_dir, executor=executor)
    wall = time.time() - t0
    with Store(run_dir / "store.sqlite") as store:
        return store.evaluations(), t0, wall


def _alternatives(operator: Any, problem: Problem, elites: dict[str, Any], target: Any, helion: str | None,
                  helion_budget_s: int | None, device: str, seed: int, reps: int) -> dict[str, Any]:
    """Side by side on the GPU: the primary baseline, torch.compile, Helion, and each method's best kernel."""
    from evo.bench.entrants import evo_entrant
    from evo.bench.measure import Entrant, measure_contenders
    from evo.evaluate.timing import time_interleaved

    tuners = operator.tuner_baselines(helion or "full", helion_budget_s)
    if not helion:
        tuners = [b for b in tuners if not b.name.startswith("helion")]
    entrants = [Entrant(b.name, b.make, b.doc) for b in operator.baselines()[:1] + tuners]
    for method, ev in elites.items():
        entrants.append(evo_entrant(operator, ev, problem, target, name=method)[0])
    results = measure_contenders(operator, problem, entrants, device=device, seed=seed, reps=reps,
                                 timer=lambda fns, **kw: time_interleaved(fns, device=device, **kw))
    out = {}
    for r in results:
        entry = r.to_json()
        if r.status == "ok" and r.median_ms:
            entry["throughput"] = float(operator.throughput(problem, r.median_ms))
        out[r.name] = entry
    return out


def bench_search(exp: Experiment, problems: list[Problem], methods: list[str], *, helion: str | None = "full",
                 helion_budget_s: int | None = None, work_dir: Path | None = None, seed: int = 1234, reps: int = 50,
                 executor: Any = None, checkpoint: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Run every method on every problem; returns the JSON document (evo.bench.search_results writes it).
    `helion_budget_s` stops Helion's autotuner at that many seconds (its best so far is then what is timed).
    Each method gets an executor of its own, with a Triton compile cache of its own, started and warmed up
    before its clock starts: every method pays its own cold compiles (one shared cache let whichever method ran
    first compile for the others). `executor` replaces them all with one (tests: a stand-in backend); the caller
    then owns it, and the methods share its caches. `checkpoint(doc)` is called once the searches end (on a GPU
    with the alternatives pending) and after each problem's alternatives: a run cut short keeps what it did."""
    import torch

    import operators
    from evo.bench.entrants import versions
    from evo.evaluate import make_executor

    smoke = exp.executor.kind == "smoke"
    operator = operators.get(exp.operator, exp.genome or None)
    work = Path(work_dir or tempfile.mkdtemp(prefix="evo-bench-search-"))
    order = [m for m in methods if m != "evo-rerun"]
    if "evo-rerun" in methods and "evo" in methods:  # last, after evo: it needs evo's database
        order.append("evo-rerun")
    found: list[dict[str, Any]] = [{} for _ in problems]
    elites: list[dict[str, Any]] = [{} for _ in problems]
    warm_up: dict[str, Any] = {}
    gpu, target, shared = "unknown", None, executor
    if shared is not None:
        shared.start()
    for method in order:
        ex = shared or make_executor(exp.executor, exp.evaluation, exp.seed,
                                     cache_dir=str(work / "triton-cache" / method))
        try:
            if shared is None:
                ex.start()
            gpu, target = (ex.infos[0].gpu if ex.infos else "unknown"), ex.target
            if problems and (shared is None or not warm_up):  # see _warm_up
                warm_up["shared" if shared is not None else method] = _warm_up(exp, problems[0], ex, work / method)
            for i, problem in enumerate(problems):
                found[i][method], elite = _run_method(exp, method, problem, ex, operator, work, i)
                if elite is not None:
                    elites[i][method] = elite
        finally:
            if shared is None:
                ex.shutdown()
    on_gpu = not smoke and torch.cuda.is_available()
    entries = [_problem_entry(problem, found[i], PENDING if on_gpu else "none: they need a GPU")
               for i, problem in enumerate(problems)]
    if smoke:
        note = "SMOKE RUN: fitness is a model estimate from the CPU interpreter, NOT a GPU timing"
    elif not on_gpu:
        note = f"NOT a GPU timing: the fitness comes from the workers' stand-in ({gpu})"
    else:
        note = "fitness: GPU medians measured by each search; alternatives timed side by side"
    doc = {"kind": "search-bench", "operator": operator.name, "gpu": gpu, "smoke": smoke or not on_gpu,
           "note": note, "versions": versions(), "experiment": exp.name, "methods": order, "mark": MARK,
           "budget": dataclasses.asdict(exp.budget), "warm_up": warm_up,
           "compile_caches": "shared" if shared is not None else "per method",
           "alternatives_caches": "fresh per problem (Triton, Inductor, Helion)" if on_gpu else None,
           "unit": operator.throughput_unit, "helion": {"effort": helion, "budget_s": helion_budget_s},
           "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "problems": entries,
           "partial": on_gpu}
    if checkpoint is not None:
        checkpoint(doc)
    for i, problem in enumerate(problems if on_gpu else []):
        print(f"[bench-search] {problem.key}: side by side (torch.compile, Helion {helion or 'not run'}, "
              f"each method's best)", flush=True)
        root = work / "alternatives" / str(i)
        with fresh_caches(root):
            with helion_progress.watch(root / f"{HELION_LOG}.csv",
                                       _progress_note(doc, entries[i], operator, problem, checkpoint)):
                entries[i]["alternatives"] = _side_by_side(operator, problem, elites[i], target,
                                                           (helion, helion_budget_s), seed, reps)
        entries[i]["alternatives_note"] = ""
        doc["partial"] = i + 1 < len(problems)
        if checkpoint is not None:
            checkpoint(doc)
    return doc


def _progress_note(doc: dict[str, Any], entry: dict[str, Any], operator: Any, problem: Problem,
                   checkpoint: Callable[[dict[str, Any]], Any] | None) -> Callable[[dict[str, Any]], None]:
    """What to do with each summary of Helion's tuning log: keep it in the problem's entry (with the throughput
    of Helion's best so far, by Helion's own timer) and write the report again, so a run stopped mid-tuning
    keeps how far Helion got."""
    def note(summary: dict[str, Any]) -> None:
        if summary.get("best_ms"):
            summary["best_throughput"] = float(operator.throughput(problem, summary["best_ms"]))
        entry["helion_progress"] = summary
        if checkpoint is not None:
            checkpoint(doc)

    return note


@contextlib.contextmanager
def fresh_caches(root: Path) -> Iterator[Path]:
    """Triton, Inductor and Helion caches of their own under `root` while the block runs (the variables as they
    were afterwards): an alternative's tuning time is then a cold one, as each method's is (a machine that ran
    this benchmark before would otherwise serve Helion its tuned configuration and torch.compile its kernels).
    Helion's tuning log goes there too (`root/HELION_LOG`.csv, read while it tunes: evo.bench.helion_progress)."""
    saved = {name: os.environ.get(name) for name in (*CACHE_VARIABLES, helion_progress.LOG_VARIABLE)}
    try:
        for name, sub in CACHE_VARIABLES.items():
            (root / sub).mkdir(parents=True, exist_ok=True)
            os.environ[name] = str(root / sub)
        os.environ[helion_progress.LOG_VARIABLE] = str(root / HELION_LOG)
        _clear_inductor_memory()
        yield root
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_method(exp: Experiment, method: str, problem: Problem, executor: Any, operator: Any, work: Path,
                index: int) -> tuple[dict[str, Any], Any]:
    """One method's search of one problem: its trace and counts, and its best correct row (None if none)."""
    print(f"[bench-search] {problem.key}: {method}", flush=True)
    db = work / f"memory-{index}.sqlite"  # evo's, for evo-rerun
    rows, t0, wall = _search(method_experiment(exp, method, problem, db), executor, work / f"{index}-{method}")
    ok = [r for r in rows if r.status == "ok" and r.median_ms]
    elite = min(ok, key=lambda r: r.median_ms) if ok else None
    return {"trace": trace(rows, operator, problem, t0), "evaluations": len(rows), "wall_s": round(wall, 2),
            "served": sum(r.worker.startswith(("store#", "shared#")) for r in rows),
            "best": float(operator.throughput(problem, elite.median_ms)) if elite is not None else None}, elite


def _warm_up(exp: Experiment, problem: Problem, executor: Any, work: Path) -> dict[str, Any]:
    """An untimed search of random genomes before a method, so that starting the executor's compile processes
    (each imports torch and triton) and the GPU worker's first launches are not charged to the method's wall
    seconds; with short budgets they took all of them. Its rows count for nothing, and its random stream is not
    the random method's (its compiles must not be that method's cache hits)."""
    warm = dataclasses.replace(method_experiment(exp, "random", problem, work / "warm-up.sqlite"),
                               budget=Budget(evaluations=max(2, int(executor.slots)), wall_s=120.0),
                               seed=exp.seed + 7919)
    print(f"[bench-search] {problem.key}: warm-up (not counted)", flush=True)
    rows, _, wall = _search(warm, executor, work / "warm-up")
    return {"evaluations": len(rows), "wall_s": round(wall, 2)}


def _clear_inductor_memory() -> None:
    """Inductor's in-process caches follow its cache directory only once cleared (as torch's own
    temporary_cache_dir does); nothing to clear before Inductor is imported."""
    utils = sys.modules.get("torch._inductor.utils")
    clear = getattr(utils, "clear_caches", None) or getattr(utils, "clear_inductor_caches", None)
    if clear is not None:
        clear()


def _problem_entry(problem: Problem, found: dict[str, Any], alternatives_note: str) -> dict[str, Any]:
    bests = [m["best"] for m in found.values() if m["best"]]
    best = max(bests) if bests else None
    for m in found.values():
        m["seconds_to_mark"], m["evaluations_to_mark"] = reach(m["trace"], MARK * best) if best else (None, None)
    return {"key": problem.key, "shape": problem.shape_text, "dtype": problem.dtype, "best": best,
            "methods": found, "alternatives": {}, "alternatives_note": alternatives_note}


def _side_by_side(operator: Any, problem: Problem, elites: dict[str, Any], target: Any,
                  helion: tuple[str | None, int | None], seed: int, reps: int) -> dict[str, Any]:
    try:
        return _alternatives(operator, problem, elites, target, *helion, "cuda", seed, reps)
    except Exception as e:  # the searches stand on their own
        return {"error": {"status": "error", "reason": f"{type(e).__name__}: {e}"}}


# -- command line -----------------------------------------------------------------------------------------
def bench_search_command(args: argparse.Namespace) -> int:
    from evo.bench.entrants import select_problems
    from evo.experiment.config import load_experiment

    try:
        exp = load_experiment(args.experiment)
        problems = select_problems(exp, args.problems)
        methods = [m.strip() for m in args.methods.split(",")]
        bad = [m for m in methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown method {bad[0]!r}; known: {', '.join(METHODS)}")
    except ValueError as e:
        print(f"evo bench-search: {e}", file=sys.stderr)
        return 2
    if args.evaluations is not None or args.wall_s is not None:
        b = exp.budget
        exp = dataclasses.replace(exp, budget=dataclasses.replace(
            b, evaluations=args.evaluations if args.evaluations is not None else b.evaluations,
            wall_s=args.wall_s if args.wall_s is not None else b.wall_s))
    report = _Report(Path(args.out), args.merge)
    doc = bench_search(exp, problems, methods, helion=None if args.helion == "none" else args.helion,
                       helion_budget_s=args.helion_budget_s, work_dir=Path(args.work_dir) if args.work_dir else None,
                       seed=args.seed, reps=args.reps, checkpoint=report.checkpoint)
    for path in report.write(doc):
        print(f"wrote {path}")
    return 0 if doc["problems"] and report.out == Path(args.out) else 1


class _Report:
    """Writes the report, at checkpoints and at the end; with --merge, into the report `out` held before this run
    (read once: a checkpoint's own file is not merged into again). A run that does not fit it goes to
    `out`/unmerged, said once."""

    def __init__(self, out: Path, merge: bool) -> None:
        self.out, self.merge, self.old, self.read = out, merge, None, False

    def write(self, doc: dict[str, Any]) -> list[Path]:
        if self.merge and not self.read:
            self.read = True
            try:
                if search_report_path(doc["gpu"], self.out).exists():
                    self.old = json.loads(search_report_path(doc["gpu"], self.out).read_text())
            except (OSError, ValueError) as e:  # ValueError: also JSON that does not parse
                self._unmerged(e)
        if self.old is not None:
            try:
                doc = merge_search_docs(self.old, doc)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                self.old = None
                self._unmerged(e)
        return write_search_report(doc, self.out)

    def checkpoint(self, doc: dict[str, Any]) -> None:
        try:
            self.write(doc)
        except OSError as e:  # the run goes on; the final write says it again if it still fails
            print(f"evo bench-search: could not write the report so far: {e}", file=sys.stderr)

    def _unmerged(self, e: Exception) -> None:
        self.out = self.out / "unmerged"  # this run's results are kept, beside the report they did not fit
        print(f"evo bench-search: --merge: {e}; this run's report goes to {self.out}", file=sys.stderr)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive whole number of seconds, got {text}")
    return value


def add_bench_search_command(subparsers: Any) -> argparse.ArgumentParser:
    b = subparsers.add_parser("bench-search", help="compare search methods: evaluations and seconds to a good kernel",
                              description=__doc__.split("\n\n")[0])
    b.add_argument("experiment", help="experiment YAML (its executor, budget and problems)")
    b.add_argument("--problems", nargs="+", metavar="P", help="keys, shapes or 1-based positions (e.g. 1-4)")
    b.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated subset of {', '.join(METHODS)}")
    b.add_argument("--evaluations", type=int, help="override the budget: evaluations per problem and method")
    b.add_argument("--wall-s", type=float, help="override the budget: seconds per problem and method")
    b.add_argument("--helion", default="full", choices=("none", "quick", "full"),
                   help="Helion's autotune effort among the alternatives (GPU, gemm, when installed) [full]")
    b.add_argument("--helion-budget-s", type=_positive_int, metavar="S",
                   help="stop Helion's autotuner after S seconds and time its best kernel so far (helion>=1.1; "
                        "the report says it was cut) [no limit]")
    b.add_argument("--out", default="reports/bench", help="folder for search-<gpu>.json/.md/.html [reports/bench]")
    b.add_argument("--merge", action="store_true",
                   help="add these problems to the report already in --out (same GPU, experiment, methods, budget "
                        "and versions; a problem run again replaces its entry): a benchmark a few problems at a time")
    b.add_argument("--work-dir", help="where the methods' run directories go [a new temporary folder]")
    b.add_argument("--seed", type=int, default=1234, help="seed of the side-by-side timing's inputs [1234]")
    b.add_argument("--reps", type=int, default=50, help="timed runs per alternative [50]")
    b.set_defaults(func=bench_search_command)
    return b
