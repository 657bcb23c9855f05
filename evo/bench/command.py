"""`evo bench`: evo's elite kernels against what users would pick instead, measured side by side.

For each problem of an experiment: search (evo.search.run.run_experiment), or read an existing run (`--run`);
take the elite (evo.archive.elite, as status, report and export do; with `--finalists N` the archive's best N,
and those the search timed within 5% of the best, re-timed on other inputs, the fastest kept:
evo.bench.entrants.finalist_pool), its genome rendered again by the operator; then, in ONE process on
ONE GPU, on the same fresh random inputs, check every contender (the operator's `bench_baselines()` and evo)
with the search's check and time the correct ones interleaved (evo.evaluate.timing.time_interleaved), then
measure them on the clocks a caller sees (evo.evaluate.clocks: eager calls, CUDA-graph replay, host µs).
Results go to `<out>/<operator>-<gpu slug>.json` (gemm+bias+gelu as gemm-bias-gelu) and a markdown table
beside it (evo.bench.results).

With several GPUs visible, problems are benchmarked concurrently, one child process per GPU and problem
(evo.bench.parallel); each problem's side-by-side timing still happens in one process on one GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any

from evo.archive.elite import ranked
from evo.bench.entrants import evo_entrant, finalist_pool, select_problems, versions
from evo.bench.measure import (
    Clocks,
    ContenderResult,
    Entrant,
    Timer,
    copy_bandwidth,
    measure_contenders,
    peak_tflops,
    search_summary,
    user_clocks,
)
from evo.bench.results import EVO_NAME, SCHEMA, load_report, merge_reports, print_summary, unit_key, write_report
from evo.experiment.oneline import one_line
from evo.experiment.rundir import STORE_NAME
from evo.experiment.spec import Experiment
from evo.problem import HOPPER, Problem, Target
from evo.store.sqlite import Store

__all__ = ["bench_main", "build_parser", "run_bench", "search_problems", "print_summary", "problem_entry",
           "select_problems", "versions", "evo_entrant", "EVO",
           "bench_command", "add_bench_command"]

EVO = EVO_NAME  # the contender name of evo's elite kernel


# -- one problem --------------------------------------------------------------------------------------------
def problem_entry(operator: Any, problem: Problem, results: list[ContenderResult], *, primary: str,
                  copy_GBps: float | None, gpu: str) -> dict[str, Any]:
    """The JSON entry of one problem from its contenders' results: throughput, ratio to `primary` (on GPU
    time, and as `call_ratio`/`graph_ratio` on the caller's clocks), and the fraction of copy bandwidth reached."""
    ukey = unit_key(operator.throughput_unit)
    flops, nbytes = int(operator.flops(problem)), int(operator.bytes(problem))
    floor_ms = nbytes / (copy_GBps * 1e9) * 1e3 if copy_GBps else None
    peak = peak_tflops(gpu, operator.math_dtype(problem) if hasattr(operator, "math_dtype") else problem.dtype)
    intensity = flops / nbytes if nbytes else None
    if operator.throughput_unit == "GB/s":
        memory_bound = True
    elif peak and copy_GBps and intensity is not None:
        memory_bound = intensity < peak * 1e12 / (copy_GBps * 1e9)
    else:
        memory_bound = False
    by_name = {r.name: r for r in results}
    base = by_name.get(primary)
    base_ms = base.median_ms if base is not None and base.status == "ok" else None
    contenders: dict[str, Any] = {}
    for r in results:
        c = r.to_json()
        if r.status == "ok" and r.median_ms:
            c[ukey] = round(operator.throughput(problem, r.median_ms), 4)
            if base_ms:
                c["ratio"] = round(base_ms / r.median_ms, 4)
            if floor_ms:
                c["copy_fraction"] = round(floor_ms / r.median_ms, 4)
            for clock in ("call", "graph"):
                mine = getattr(r, f"{clock}_ms")
                theirs = getattr(base, f"{clock}_ms") if base_ms else None
                if mine and theirs:
                    c[f"{clock}_ratio"] = round(theirs / mine, 4)
        contenders[r.name] = c
    return {"key": problem.key, **problem.dims, "dtype": problem.dtype, "dims": [d for d, _ in problem.shape],
            "flops": flops, "bytes": nbytes, "intensity": round(intensity, 3) if intensity else None,
            "memory_bound": memory_bound, "peak_tflops": peak, "copy_GBps": copy_GBps,
            "floor_ms": round(floor_ms, 6) if floor_ms else None, "contenders": contenders}


def _bench_problem(operator: Any, problem: Problem, store: Store | None, entrants: list[Entrant], *,
                   target: Target, gpu: str, copy_GBps: float, timer: Timer, device: str, seed: int, reps: int,
                   finalists: int, with_evo: bool, experiment: Experiment | None = None,
                   clocks: Clocks | None = None) -> dict[str, Any]:
    extra: dict[str, Any] = {"evo_genome": None}
    evo_result: ContenderResult | None = None
    # the elites status, report and export name (evo.archive.elite), this GPU's when it measured any
    elites = ranked(store, problem, experiment, gpu=gpu) if (store is not None and with_evo) else []
    if with_evo:
        extra.update(search_summary(store, problem.key) if store is not None else {"evaluations": 0})
    chosen = elites[0] if elites else None
    pool = finalist_pool(elites, finalists)
    if len(pool) > 1:
        # a separate pass on other inputs picks among the search's best few, so the reported timing of the
        # chosen kernel is a fresh measurement rather than the lucky one that made it win
        cands = [evo_entrant(operator, e, problem, target, f"finalist{i}", store.source(e.source_hash))[0]
                 for i, e in enumerate(pool)]
        pre = measure_contenders(operator, problem, cands, timer=timer, device=device, seed=seed + 1, reps=reps,
                                 warmup=3)
        extra["evo_finalists"] = [{"genome_hash": operator.family.from_canonical(e.genome).hash,
                                   "source_hash": e.source_hash, "search_ratio": e.ratio, "search_ms": e.median_ms,
                                   "status": r.status, "prepass_ms": r.median_ms}
                                  for e, r in zip(pool, pre, strict=True)]
        timed = [(r.median_ms, e) for e, r in zip(pool, pre, strict=True) if r.status == "ok"]
        chosen = min(timed, key=lambda t: t[0])[1] if timed else chosen
    all_entrants = list(entrants)
    if chosen is not None:
        stored = store.source(chosen.source_hash) if store is not None else None
        entrant, differs = evo_entrant(operator, chosen, problem, target, stored=stored)
        all_entrants.append(entrant)
        if differs:
            extra["evo_note"] = "the kernel rendered now differs from the source the search measured"
        extra.update(evo_genome=operator.family.from_canonical(chosen.genome).as_dict(),
                     evo_source_hash=chosen.source_hash, evo_search_ratio=chosen.ratio,
                     evo_search_gpu=chosen.gpu)
    elif with_evo:
        why = "no run store" if store is None else "the search found no correct kernel for this problem"
        evo_result = ContenderResult(EVO, status="missing", reason=why)
    results = measure_contenders(operator, problem, all_entrants, timer=timer, device=device, seed=seed, reps=reps,
                                 clocks=clocks)
    if evo_result is not None:
        results.append(evo_result)
    entry = problem_entry(operator, problem, results, primary=entrants[0].name, copy_GBps=copy_GBps, gpu=gpu)
    entry.update(extra)
    return entry


# -- a whole run in this process ----------------------------------------------------------------------------
def search_problems(experiment: Experiment, problems: list[Problem], run_dir: Path) -> None:
    """Search `problems` with the experiment's settings into a new run directory, showing progress."""
    from evo.search.run import run_experiment
    from evo.surface.progress import Progress

    exp = dataclasses.replace(experiment, problems=tuple(problems))
    progress = Progress(exp.problems, budget=exp.budget.evaluations, tty=False,
                        smoke=exp.executor.kind == "smoke")
    try:
        run_experiment(exp, run_dir, resume=False, on_event=progress)
    finally:
        progress.close()


def run_bench(experiment: Experiment, problems: list[Problem], run_dir: Path | None, *, search: bool,
              contenders: list[str] | None = None, seed: int = 1234, reps: int = 100, finalists: int = 3,
              device: str = "cuda", timer: Timer | None = None, clocks: Clocks | None = None) -> dict[str, Any]:
    """Search (when `search`) into `run_dir`, then benchmark every problem here; returns the JSON document.
    On a GPU the caller's clocks are measured too (`clocks`, default evo.bench.measure.user_clocks)."""
    import torch

    import operators
    from evo.evaluate.timing import time_interleaved
    from evo.surface.export import run_target

    on_gpu = str(device).startswith("cuda")
    if on_gpu and not torch.cuda.is_available():
        raise RuntimeError("evo bench measures on a CUDA GPU and none is visible here")
    operator = operators.get(experiment.operator, experiment.genome or None)
    failures: list[dict[str, Any]] = []
    t0 = time.time()
    if search:
        if run_dir is None:
            raise ValueError("a search needs a run directory")
        try:
            search_problems(experiment, problems, run_dir)
        except Exception as e:  # baselines are still worth measuring; evo is then reported missing
            failures.append({"key": "*", "reason": f"search failed: {type(e).__name__}: {e}"})
    store_path = run_dir / STORE_NAME if run_dir is not None else None
    store = Store(store_path) if store_path is not None and store_path.exists() else None
    baselines = operator.bench_baselines()
    entrants = [Entrant(b.name, b.make, b.doc) for b in baselines]
    if contenders:
        entrants = [e for i, e in enumerate(entrants) if i == 0 or e.name in contenders]
    with_evo = not contenders or EVO in contenders
    timer = timer or (lambda fns, **kw: time_interleaved(fns, device=device, **kw))
    if clocks is None and on_gpu:
        clocks = lambda fns: user_clocks(fns, device)  # noqa: E731
    # off a GPU (tests, with a stand-in timer) the device is named as such: nothing there is a GPU timing
    gpu = torch.cuda.get_device_name(device) if on_gpu else f"{device} (not a GPU)"
    meta = store.all_meta() if store is not None else {}
    if "target" in meta:
        target = run_target(meta)
    else:
        target = Target.from_torch(torch.device(device).index or 0) if on_gpu else HOPPER
    copy_GBps = round(copy_bandwidth(device, nbytes=1 << 30 if on_gpu else 1 << 20, timer=timer), 1)
    entries = []
    try:
        for problem in problems:
            start = time.time()
            print(f"[bench] {problem.key}: measuring {len(entrants) + with_evo} contenders on {gpu}", flush=True)
            try:
                entry = _bench_problem(operator, problem, store, entrants, target=target, gpu=gpu, copy_GBps=copy_GBps,
                                       timer=timer, device=device, seed=seed, reps=reps, finalists=finalists,
                                       with_evo=with_evo, experiment=experiment, clocks=clocks)
            except Exception as e:
                failures.append({"key": problem.key, "reason": f"{type(e).__name__}: {e}"})
                print(f"[bench] {problem.key}: failed: {type(e).__name__}: {e}", flush=True)
                continue
            entry["bench_s"] = round(time.time() - start, 1)
            entries.append(entry)
    finally:
        if store is not None:
            store.close()
    names = [e.name for e in entrants] + ([EVO] if with_evo else [])
    return {"schema": SCHEMA, "operator": operator.name, "gpu": gpu, "versions": versions(),
            "primary": entrants[0].name, "throughput_unit": operator.throughput_unit, "copy_GBps": copy_GBps,
            "contenders": names, "experiment": experiment.name, "run_dir": str(run_dir) if run_dir else None,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "settings": {"seed": seed, "reps": reps, "finalists": finalists, "searched": search,
                         "contenders_asked": contenders, "clocks": clocks is not None},
            "wall_s": round(time.time() - t0, 1), "problems": entries, "failures": failures}


# -- command line -----------------------------------------------------------------------------------------
def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    p = parser or argparse.ArgumentParser(prog="evo bench", description=__doc__.split("\n\n")[0])
    p.add_argument("experiment", nargs="?", help="experiment YAML (not needed with --merge)")
    p.add_argument("--out", default="reports/bench", help="folder for <operator>-<gpu>.json/.md [reports/bench]")
    p.add_argument("--problems", nargs="+", metavar="P", help="keys, shapes or 1-based positions (e.g. 1-5)")
    p.add_argument("--run", metavar="DIR", help="benchmark the elites of this run directory (no search)")
    p.add_argument("--search-dir", metavar="DIR",
                   help="run directory for the search [<output>/<name>-bench-<time>]")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="merge partial benchmark files into one")
    p.add_argument("--contenders", help="comma-separated subset of contenders (the primary is always kept, "
                                        "and evo in a run that searches)")
    p.add_argument("--gpus", type=int, help="GPUs to spread problems over [every visible GPU]")
    p.add_argument("--search-per-gpu", action="store_true",
                   help="with several GPUs, search each problem in its own process on its own GPU "
                        "(local executor) instead of one search over all GPUs")
    p.add_argument("--wall-s", type=float, help="override the experiment's search budget: seconds per problem")
    p.add_argument("--evaluations", type=int, help="override the experiment's search budget: evaluations per problem")
    p.add_argument("--timeout-s", type=float, default=1800.0, help="per-problem limit of a child process [1800]")
    p.add_argument("--reps", type=int, default=100, help="timed runs per contender (fewer when slow) [100]")
    p.add_argument("--finalists", type=int, default=3,
                   help="elites re-timed to pick evo's contender, with those the search timed within 5%% of the "
                        "best, up to 3x as many [3]")
    p.add_argument("--seed", type=int, default=1234, help="seed of the benchmark's random inputs [1234]")
    p.add_argument("--partial", metavar="FILE", help=argparse.SUPPRESS)  # children write their JSON here
    return p


def checked_contenders(experiment: Experiment, text: str, *, searching: bool) -> list[str]:
    """The names of `--contenders`, checked against the operator's baselines and evo. A run that searches always
    times evo (its kernels are what the search is for: without evo, the search's work would be thrown away)."""
    import operators

    names = list(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))
    known = [b.name for b in operators.get(experiment.operator, experiment.genome or None).bench_baselines()] + [EVO]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"--contenders: {', '.join(unknown) or 'none given'} is not a contender of "
                         f"{experiment.operator}; its contenders are {', '.join(known)}")
    if searching and EVO not in names:
        print(f"[bench] --contenders: {EVO} added (this run searches, and its kernels are what the bench times)",
              file=sys.stderr)
        names.append(EVO)
    return names


def bench_command(args: argparse.Namespace) -> int:
    """Runs `evo bench` from parsed arguments (see build_parser); returns the exit status."""
    if args.merge:
        try:
            docs = [load_report(p) for p in args.merge]
            doc = merge_reports(docs, names=[str(p) for p in args.merge])
        except ValueError as e:
            print(f"evo bench: {one_line(str(e))}", file=sys.stderr)
            return 2
        paths = _write_or_say(doc, args.out)
        if paths is None:
            return 2
        print_summary(doc, paths)
        return 0
    if not args.experiment:
        print("evo bench: an experiment file is needed (or --merge FILES)", file=sys.stderr)
        return 2
    from evo.experiment.config import load_experiment

    try:
        experiment = load_experiment(args.experiment)
        problems = select_problems(experiment, args.problems)
    except ValueError as e:
        print(f"evo bench: {one_line(str(e))}", file=sys.stderr)
        return 2
    if not _cuda_visible():
        print("evo bench: it times kernels on a CUDA GPU and none is visible here (without one, try the search: "
              "evo run experiments/smoke.yaml)", file=sys.stderr)
        return 2
    if args.wall_s is not None or args.evaluations is not None:
        budget = experiment.budget
        budget = dataclasses.replace(budget, wall_s=budget.wall_s if args.wall_s is None else args.wall_s,
                                     evaluations=budget.evaluations if args.evaluations is None else args.evaluations)
        experiment = dataclasses.replace(experiment, budget=budget)
    contenders = None
    if args.contenders:
        try:
            contenders = checked_contenders(experiment, args.contenders, searching=not args.run)
        except ValueError as e:
            print(f"evo bench: {one_line(str(e))}", file=sys.stderr)
            return 2
        args.contenders = ",".join(contenders)  # as the children of a run over several GPUs get it
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    run_dir = Path(args.run) if args.run else Path(args.search_dir or
                                                   Path(experiment.output) / f"{experiment.name}-bench-{stamp}")
    if args.run and args.partial is None and not (run_dir / STORE_NAME).exists():
        print(f"evo bench: {one_line(str(run_dir))} holds no run ({STORE_NAME} missing)", file=sys.stderr)
        return 2
    if args.partial is None:
        from evo.bench.parallel import gpu_slots, run_parallel

        slots = gpu_slots(args.gpus)
        if len(slots) > 1 and len(problems) > 1:
            return run_parallel(args, experiment, problems, run_dir, slots, search_problems)
    if args.partial is not None and args.search_per_gpu and not args.run:
        # one process per GPU: several embedded Ray instances on one machine are not supported
        experiment = dataclasses.replace(experiment, executor=dataclasses.replace(experiment.executor, kind="local",
                                                                                  gpus=None))
    doc = run_bench(experiment, problems, run_dir, search=not args.run, contenders=contenders, seed=args.seed,
                    reps=args.reps, finalists=args.finalists)
    if args.partial is not None:
        Path(args.partial).parent.mkdir(parents=True, exist_ok=True)
        Path(args.partial).write_text(json.dumps(doc, indent=1) + "\n")
        return 0 if doc["problems"] else 1
    paths = _write_or_say(doc, args.out)
    if paths is None:
        return 1
    print_summary(doc, paths)
    return 0 if doc["problems"] else 1


def _write_or_say(doc: dict[str, Any], out: str | Path) -> Any:
    """The paths `write_report` wrote, or None after one line saying why it could not (a full disk, a device or a
    FIFO at the file's name: evo.store.atomic_file refuses to replace one)."""
    try:
        return write_report(doc, out)
    except OSError as e:
        print(f"evo bench: cannot write the results under {one_line(str(out))}: {one_line(e.strerror or str(e))}"
              f"{f' ({e.filename})' if e.filename else ''}", file=sys.stderr)
        return None


def bench_main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m evo.bench.command ARGS`; returns the exit status."""
    return bench_command(build_parser().parse_args(argv))


def _cuda_visible() -> bool:
    import torch

    return torch.cuda.is_available()


def add_bench_command(subparsers: Any) -> argparse.ArgumentParser:
    """Register `bench` on the `evo` command's subparsers (argparse's add_subparsers() object)."""
    b = subparsers.add_parser("bench", help="benchmark evo's elite kernels against the usual alternatives",
                              description=__doc__.split("\n\n")[0])
    build_parser(b)
    b.set_defaults(func=bench_command)
    return b


if __name__ == "__main__":
    sys.exit(bench_main())
