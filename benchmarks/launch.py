"""`python -m benchmarks.launch`: evo's kernels as a user gets them, on the clocks a user sees.

For each experiment (default: the four benchmark experiments) and each of its problems: take the elite of an
already-searched run (`--run`) or of a short search made here (`--evaluations`, through `evo bench`'s search:
evo.bench.command.search_problems), export it (evo.surface.export.export_one), write the module to a file and
import it, as a user would. Then, in this one process on this one GPU and the same inputs, check and time the
operator's primary baseline (cuBLAS, or torch eager), torch.compile (the operator's bench contender) and the
exported kernel on GPU time and on the clocks of evo.evaluate.clocks (eager calls, CUDA-graph replay, host µs),
through `evo bench`'s measurement (evo.bench.measure). Last, the exported module's own `_evo_measure()` gives its
ratio on the run's objective clock (`selfcheck_ratio`) beside its header's (`header_ratio`): a module that
disagrees with its header is caught here. Writes `<out>/launch-<gpu slug>.json` and `.md`
(benchmarks.launch_results) and prints the table last. Without a GPU it refuses in one line (exit status 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import hashlib
import importlib.util
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.launch_results import RIVAL, SCHEMA, launch_paths, launch_table, merge_launch, write_launch
from evo.bench.cells import EVO_NAME
from evo.bench.command import problem_entry, search_problems, select_problems, versions
from evo.bench.measure import Clocks, Entrant, Timer, measure_contenders, user_clocks
from evo.experiment.oneline import one_line
from evo.experiment.rundir import EXPERIMENT_NAME, STORE_NAME
from evo.experiment.spec import Experiment
from evo.problem import Problem
from evo.store.sqlite import Store

__all__ = ["DEFAULT_EXPERIMENTS", "Job", "build_parser", "plan_jobs", "load_module", "measure_problem",
           "run_launch", "launch_main"]

_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXPERIMENTS = tuple(str(_ROOT / "experiments" / f"{name}.yaml")
                            for name in ("bench_gemm_llm", "bench_gemm_ragged", "bench_softmax", "bench_rmsnorm"))


@dataclasses.dataclass
class Job:
    """One experiment's share of the work: its problems, and the run holding their elites (None: search first)."""

    experiment: Experiment
    problems: list[Problem]
    run: Path | None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.launch", description=__doc__.split("\n\n")[0])
    p.add_argument("experiments", nargs="*", metavar="EXPERIMENT",
                   help="experiment YAML files [the four bench_*.yaml: gemm_llm, gemm_ragged, softmax, rmsnorm]")
    p.add_argument("--run", nargs="+", metavar="RUN",
                   help="already-searched run directories, one per experiment in order (alone: each run's own "
                        "experiment.yaml); no search")
    p.add_argument("--evaluations", type=int, default=100,
                   help="without --run: the short search's evaluations per problem [100]")
    p.add_argument("--search-dir", metavar="DIR",
                   help="without --run: where the searches' run directories go [<experiment output>]")
    p.add_argument("--problems", nargs="+", metavar="P",
                   help="keys, shapes or 1-based positions (positions count in each experiment)")
    p.add_argument("--max-problems", type=int, metavar="N", help="at most N problems of each experiment")
    p.add_argument("--out", default="reports/bench", help="folder for launch-<gpu>.json/.md [reports/bench]")
    p.add_argument("--merge", action="store_true",
                   help="join the problems measured here to the launch-<gpu>.json already in --out (same GPU model)")
    p.add_argument("--reps", type=int, default=100, help="timed runs per contender on GPU time [100]")
    p.add_argument("--seed", type=int, default=1234, help="seed of the benchmark's random inputs [1234]")
    return p


def _problems_of(experiment: Experiment, tokens: list[str] | None, matched: set[str]) -> list[Problem]:
    """The problems of `experiment` that `tokens` name (all without tokens); a token naming none of this
    experiment's problems is left to the others (it must name some problem of one of them)."""
    if not tokens:
        return list(experiment.problems)
    chosen: list[Problem] = []
    for token in (t.strip() for raw in tokens for t in raw.split(",") if t.strip()):
        try:
            hits = select_problems(experiment, [token])
        except ValueError:
            continue
        matched.add(token)
        chosen += [p for p in hits if p not in chosen]
    return chosen


def plan_jobs(args: argparse.Namespace) -> list[Job]:
    """The work the arguments ask for; a ValueError names the first thing wrong, before any work starts."""
    from evo.experiment.config import load_experiment

    if args.max_problems is not None and args.max_problems < 1:
        raise ValueError(f"--max-problems must be at least 1, got {args.max_problems}")
    if args.evaluations < 1:
        raise ValueError(f"--evaluations must be at least 1, got {args.evaluations}")
    runs = [Path(r) for r in args.run or []]
    for run in runs:
        if not (run / STORE_NAME).exists():
            raise ValueError(f"{run} holds no run ({STORE_NAME} missing)")
    paths = list(args.experiments)
    if runs and not paths:
        missing = [str(r) for r in runs if not (r / EXPERIMENT_NAME).exists()]
        if missing:
            raise ValueError(f"{missing[0]} holds no {EXPERIMENT_NAME}: name its experiment file too")
        paths = [str(r / EXPERIMENT_NAME) for r in runs]
    paths = paths or list(DEFAULT_EXPERIMENTS)
    if runs and len(runs) != len(paths):
        raise ValueError(f"{len(runs)} run directories for {len(paths)} experiments: give one run per experiment")
    matched: set[str] = set()
    jobs = []
    for i, path in enumerate(paths):
        experiment = load_experiment(path)
        problems = _problems_of(experiment, args.problems, matched)
        problems = problems[: args.max_problems] if args.max_problems else problems
        if problems:
            jobs.append(Job(experiment, problems, runs[i] if runs else None))
    if args.problems:
        unknown = [t for raw in args.problems for t in raw.split(",") if t.strip() and t.strip() not in matched]
        if unknown:
            raise ValueError(f"no problem {unknown[0]!r} in {', '.join(Path(p).name for p in paths)}")
    return jobs


def load_module(text: str, path: Path) -> ModuleType:
    """Write an exported module to `path` and import it, as its user would (Triton reads kernels from files)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    name = f"evo_launch_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _selfcheck(module: ModuleType, device: str) -> dict[str, Any]:
    """The exported module's own measurement and the ratios on the run's objective clock, its and its header's."""
    if not hasattr(module, "_evo_measure"):
        return {"selfcheck_error": "the operator offers no self-check, so the module cannot measure itself"}
    try:
        m = module._evo_measure(device)
    except Exception as e:
        return {"selfcheck_error": one_line(f"{type(e).__name__}: {e}")}
    clock = "call" if m.get("objective") == "call" else "gpu"
    return {"selfcheck": m, "objective": m.get("objective"), "selfcheck_ratio": m.get(f"{clock}_ratio"),
            "header_ratio": m.get(f"header_{clock}_ratio")}


def measure_problem(operator: Any, problem: Problem, store: Store, job: Job, *, kernels: Path, gpu: str,
                    timer: Timer, clocks: Clocks | None, device: str, seed: int, reps: int) -> dict[str, Any]:
    """One problem's entry: the primary, torch.compile and the exported elite checked and timed side by side,
    then the exported module's self-measurement."""
    from evo.surface.export import export_one

    baselines = operator.bench_baselines()
    entrants = [Entrant(b.name, b.make, b.doc) for i, b in enumerate(baselines) if i == 0 or b.name == RIVAL]
    extra: dict[str, Any] = {"experiment": job.experiment.name, "operator": operator.name,
                             "primary": baselines[0].name, "run_dir": str(job.run) if job.run else None}
    module = None
    try:
        text, elite = export_one(store, problem.sizes, problem.dtype, job.experiment)
        path = kernels / f"{problem.operator}_{problem.shape_text}_{problem.dtype}.py"
        module = load_module(text, path)
        entry_fn = getattr(module, operator.entry)
        entrants.append(Entrant(EVO_NAME, lambda p: entry_fn, f"evo elite exported to {path}"))
        extra.update(kernel=str(path), evo_genome=operator.family.from_canonical(elite.evaluation.genome).as_dict())
    except Exception as e:  # no elite, or a module that does not import: the others are still worth timing
        extra["evo_missing"] = one_line(f"{type(e).__name__}: {e}")
    results = measure_contenders(operator, problem, entrants, timer=timer, device=device, seed=seed, reps=reps,
                                 clocks=clocks)
    entry = problem_entry(operator, problem, results, primary=baselines[0].name, copy_GBps=None, gpu=gpu)
    entry.update(extra)
    if module is not None:
        entry.update(_selfcheck(module, device))
    return entry


def run_launch(jobs: list[Job], *, evaluations: int, search_dir: str | None = None, seed: int = 1234,
               reps: int = 100, device: str = "cuda",
               progress: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Search where needed, then measure every job's problems here; returns the JSON document. `progress` gets the
    document as it stands after each problem (so a run cut short keeps what it measured)."""
    import torch

    import operators
    from evo.evaluate.timing import time_interleaved

    gpu = torch.cuda.get_device_name(device)
    timer: Timer = lambda fns, **kw: time_interleaved(fns, device=device, **kw)  # noqa: E731
    clocks: Clocks = lambda fns: user_clocks(fns, device)  # noqa: E731
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    entries: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    t0 = time.time()

    def document() -> dict[str, Any]:
        return {"schema": SCHEMA, "kind": "launch", "gpu": gpu, "versions": versions(),
                "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                "settings": {"seed": seed, "reps": reps, "evaluations": evaluations,
                             "experiments": [j.experiment.name for j in jobs]},
                "wall_s": round(time.time() - t0, 1), "problems": entries, "failures": failures}

    for job in jobs:
        exp = job.experiment
        if job.run is None:
            budget = dataclasses.replace(exp.budget, evaluations=evaluations)
            exp = dataclasses.replace(exp, budget=budget)
            job.run = Path(search_dir or exp.output) / f"{exp.name}-launch-{stamp}"
            print(f"[launch] searching {len(job.problems)} problems of {exp.name} ({evaluations} evaluations "
                  f"each) into {job.run}", flush=True)
            try:
                search_problems(exp, job.problems, job.run)
            except Exception as e:  # the baselines are still measured; evo is then reported missing
                failures.append({"key": exp.name, "reason": one_line(f"search failed: {type(e).__name__}: {e}")})
        operator = operators.get(exp.operator, exp.genome or None)
        if not (job.run / STORE_NAME).exists():
            failures += [{"key": p.key, "reason": "no run store"} for p in job.problems]
            continue
        with Store(job.run / STORE_NAME, readonly=True) as store:
            for problem in job.problems:
                print(f"[launch] {problem.key}: measuring on {gpu}", flush=True)
                try:
                    entries.append(measure_problem(operator, problem, store, job, kernels=job.run / "exported",
                                                   gpu=gpu, timer=timer, clocks=clocks, device=device, seed=seed,
                                                   reps=reps))
                except Exception as e:
                    failures.append({"key": problem.key, "reason": one_line(f"{type(e).__name__}: {e}")})
                if progress is not None:
                    progress(document())
    return document()


def launch_paths_for(out: str) -> Path:
    """The launch bench JSON of this machine's GPU under `out`."""
    import torch

    return launch_paths({"gpu": torch.cuda.get_device_name(0)}, out)[0]


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def launch_main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m benchmarks.launch ARGS`; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        jobs = plan_jobs(args)
    except (ValueError, OSError) as e:
        print(f"evo launch bench: {one_line(str(e))}", file=sys.stderr)
        return 2
    if not _cuda_visible():
        print("evo launch bench: it times kernels on a CUDA GPU and none is visible here", file=sys.stderr)
        return 2
    if not jobs:
        print("evo launch bench: no problem to measure", file=sys.stderr)
        return 2
    earlier = None
    if args.merge and launch_paths_for(args.out).exists():
        earlier = json.loads(launch_paths_for(args.out).read_text())

    def save(doc: dict[str, Any]) -> tuple[Path, Path]:
        return write_launch(merge_launch(earlier, doc) if earlier is not None else doc, args.out)

    doc = run_launch(jobs, evaluations=args.evaluations, search_dir=args.search_dir, seed=args.seed, reps=args.reps,
                     progress=save)
    paths = save(doc)
    doc = merge_launch(earlier, doc) if earlier is not None else doc
    print("wrote " + ", ".join(str(p) for p in paths))
    print(launch_table(doc))
    return 0 if doc["problems"] and not doc["failures"] else 1


if __name__ == "__main__":
    sys.exit(launch_main())
