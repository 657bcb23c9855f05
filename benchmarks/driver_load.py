"""A LOAD TEST of the search's driver: the real search (GEMM genomes, variation, archive, SQLite store, the Ray
executor with its compile tasks and one actor per "GPU") run against fake GPU workers that hold each
candidate for a recorded evaluation time (benchmarks.loadtest), as 1, 2, 4 and 8 GPUs would load it.

It answers where the CPU side saturates as GPUs are added: candidates per minute against the ideal
(GPUs x recorded rate), the fake GPUs' busy share, the driver process's CPU use, the machine's, and (with
`profile`) where the driver's own loop spends its time (store writes, archive updates, variation, render
and look-up, Ray submits, waits and gets, events). Nothing it measures is a fitness; its runs live in a
temporary directory that is deleted.

    python -m benchmarks.driver_load --gpus 1 2 4 8 --seconds 20 --profile -o reports/gpu/driver-load-simulated.json

`--problems llm` searches the ten GEMM shapes of experiments/llm_gemm.yaml one after the other, as that experiment
does, instead of one 4096^3 problem: each problem stops at `--problem-evaluations` (llm_gemm's own budget is 400)
or at its share of `--seconds`, so the rates include every hand-over from one problem to the next. The surrogate
(the guided emitter, among the default emitters) is on in both modes; `--no-surrogate` leaves it out. Load tests
never read or write the results database shared by runs (`memory: false`): a fake row served from an earlier
load test would inflate the rates.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.loadtest import COMPILE_S, H200_EVAL_S, LOADTEST_GPU, LoadTestBackend
from evo.evaluate.occupancy import merge_summaries
from evo.experiment.spec import Experiment

__all__ = ["loadtest_experiment", "run_load", "run_matrix", "main", "PROFILE_PARTS", "PROBLEM_SETS"]

_EXPERIMENT = """\
name: LOADTEST
operator: gemm
problems: {{shapes: [{shapes}], dtypes: [bf16]}}
descriptors: [tile_area, {{name: structure}}]
budget: {{evaluations: {evaluations}, wall_s: {seconds}, stagnation: null}}
seed: {seed}
executor: {{kind: ray}}
memory: false
{emitters}"""

# the problem sets a load test searches: one square GEMM, or the ten shapes of experiments/llm_gemm.yaml (its
# LLM inference and training GEMMs; tests/bench/test_driver_load.py checks they are the file's)
PROBLEM_SETS: dict[str, tuple[str, ...]] = {
    "one": ("4096x4096x4096",),
    "llm": ("4096x4096x4096", "8192x8192x8192", "4096x6144x4096", "4096x28672x4096", "4096x4096x14336",
            "16x4096x4096", "16x28672x4096", "128x4096x14336", "1000x3000x2000", "2048x2048x16384"),
}
_NO_SURROGATE = "emitters: [variation, exploit, restart]\n"  # the default emitters less the guided one

# The driver's own work, by the function that does it: (file suffix, function name) -> part of the loop.
PROFILE_PARTS: dict[str, tuple[str, str]] = {
    "store_write": ("evo/store/sqlite.py", "add"),
    "store_meta": ("evo/store/sqlite.py", "set_meta"),
    "store_lookup": ("evo/store/sqlite.py", "lookup"),
    "archive_add": ("evo/archive/grid.py", "add"),
    "variation": ("evo/search/variation.py", "child"),
    "render": ("evo/evaluate/pipeline.py", "render"),
    "events": ("evo/search/loop.py", "_emit"),
    "submit": ("evo/evaluate/ray_executor.py", "_pump"),
    "collect": ("evo/evaluate/ray_executor.py", "_collect"),
    "ray_wait": ("ray/_private/worker.py", "wait"),
    "poll": ("evo/evaluate/ray_executor.py", "poll"),
    "surrogate_fit": ("evo/search/surrogate.py", "fit"),  # in the search's thread only when refitting in place
    "surrogate_wait": ("evo/search/emitters/guided.py", "result"),  # waiting for a refit made in a thread
    "surrogate_score": ("evo/search/surrogate.py", "score"),
    "store_iter": ("evo/store/sqlite.py", "iter"),
    "first_population": ("evo/search/variation.py", "initial"),
    "search": ("evo/search/loop.py", "search_problem"),
}


def loadtest_experiment(seconds: float, seed: int = 0, problems: str = "one", problem_evaluations: int | None = None,
                        surrogate: bool = True) -> Experiment:
    """The load test's experiment: the `problems` set searched for `seconds` in all, each problem for its share of
    them or `problem_evaluations`, whichever comes first; with or without the surrogate-guided emitter."""
    from evo.experiment.config import parse_experiment

    if problems not in PROBLEM_SETS:
        raise ValueError(f"problems {problems!r}: expected one of {', '.join(PROBLEM_SETS)}")
    if problem_evaluations is not None and problem_evaluations < 1:
        raise ValueError(f"problem_evaluations {problem_evaluations}: expected at least 1, or None")
    shapes = PROBLEM_SETS[problems]
    text = _EXPERIMENT.format(shapes=", ".join(shapes), seconds=seconds / len(shapes), seed=seed,
                              evaluations="null" if problem_evaluations is None else problem_evaluations,
                              emitters="" if surrogate else _NO_SURROGATE)
    return parse_experiment(text, default_name="LOADTEST")


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU jiffies of the machine since boot (Linux /proc/stat); (0, 0) elsewhere."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except OSError:
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def _tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of `root`'s descendant processes: the Ray
    instance this driver started, its raylet, task and actor processes (Linux /proc; 0 elsewhere)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(entry.name)] = int(fields[1])
        times[int(entry.name)] = sum(float(x) for x in fields[11:15]) / tick
    total, frontier = 0.0, [root]
    while frontier:
        pid = frontier.pop()
        children = [c for c, parent in parents.items() if parent == pid]
        total += sum(times[c] for c in children)
        frontier.extend(children)
    return total


def _profile_parts(profiler: cProfile.Profile, wall_s: float) -> dict[str, float]:
    """Seconds of cumulative time in each of PROFILE_PARTS (calls nest: `poll` holds `ray_wait` and
    `collect`, `search` holds everything), and the share of the wall time."""
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for part, (suffix, name) in PROFILE_PARTS.items():
        total = sum(v[3] for (file, _, func), v in stats.items() if func == name and file.endswith(suffix))
        out[part] = round(total, 3)
    out["wall"] = round(wall_s, 3)
    return out


class _LazyLookup:
    """Store.lookup on the run's store, opened at the first look-up (the search creates the store): the
    look-up a real run's executor makes for every candidate."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store: Any = None

    def __call__(self, *key: Any) -> Any:
        if self.store is None:
            from evo.store.sqlite import Store

            self.store = Store(self.path)
        return self.store.lookup(*key)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def run_load(gpus: int, seconds: float = 10.0, backend: LoadTestBackend | None = None,
             compile_workers: int | None = None, profile: bool = False, seed: int = 0,
             warmup_s: float = 0.0, problems: str = "one", problem_evaluations: int | None = None,
             surrogate: bool = True) -> dict[str, Any]:
    """One load test: the search for `warmup_s` + `seconds` against `gpus` fake GPUs on the Ray that is
    running (or an embedded one it starts); the rates count what finished after the warm-up (Ray starting
    its task processes), the CPU shares the whole run. `problems`, `problem_evaluations`, `surrogate`: see
    loadtest_experiment. Returns the figures (see the module's docstring)."""
    from evo.evaluate.ray_executor import RayExecutor
    from evo.experiment.spec import ExecutorSpec
    from evo.search.run import run_experiment
    from evo.store.sqlite import Store

    backend = backend or LoadTestBackend()
    exp = loadtest_experiment(warmup_s + seconds, seed, problems, problem_evaluations, surrogate)
    spec = ExecutorSpec(kind="ray", gpus=gpus, compile_workers=compile_workers)
    with tempfile.TemporaryDirectory(prefix="evo-loadtest-") as tmp:
        run_dir = Path(tmp) / "LOADTEST"
        lookup = _LazyLookup(run_dir / "store.sqlite")
        ex = RayExecutor(backend, spec, exp.evaluation, lookup=lookup)
        ex.start()
        try:
            profiler = cProfile.Profile() if profile else None
            busy0, total0 = _machine_busy()
            load0 = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
            cpu0, ray_cpu0 = time.process_time(), _tree_cpu_s(os.getpid())
            thread0 = time.thread_time()
            if profiler is not None:
                profiler.enable()
            t0 = time.time()
            summary = run_experiment(exp, run_dir, executor=ex)
            t1 = time.time()
            if profiler is not None:
                profiler.disable()
            driver_cpu = time.process_time() - cpu0
            search_thread_cpu = time.thread_time() - thread0  # the driver's less its threads (surrogate refits)
            load1 = round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None
            ray_cpu = _tree_cpu_s(os.getpid()) - ray_cpu0
            busy1, total1 = _machine_busy()
            slots, compile_slots = ex.slots, ex._compile_slots
        finally:
            ex.shutdown()
            lookup.close()
        with Store(run_dir / "store.sqlite") as store:
            rows = store.evaluations()
            queue = merge_summaries([store.meta(f"queue:{p.key}") for p in exp.problems])
    wall = summary.elapsed_s
    window = t1 - t0 - warmup_s
    rows = [r for r in rows if r.finished_at >= t0 + warmup_s]
    measured = [r for r in rows if r.gpu == LOADTEST_GPU and r.worker.startswith("loadtest:")]
    gpu_busy = sum(r.finished_at - max(r.started_at, t0 + warmup_s) for r in measured)
    compile_busy = sum(r.compile_s or 0.0 for r in rows)
    rate = len(rows) / window * 60.0
    ideal = gpus * 60.0 / backend.eval_s if backend.eval_s else None
    result: dict[str, Any] = {
        "gpus": gpus, "problems": len(exp.problems), "problems_searched": len(summary.problems),
        "surrogate": surrogate, "seconds": round(window, 2), "warmup_s": warmup_s, "evaluations": len(rows),
        "evaluations_with_warmup": summary.session_evaluations, "gpu_evaluated": len(measured),
        "per_minute": round(rate, 1),
        "ideal_per_minute": round(ideal, 1) if ideal else None,
        "efficiency": round(rate / ideal, 3) if ideal else None,
        "gpu_busy_share": round(gpu_busy / (gpus * window), 3),
        "slots": slots, "compile_slots": compile_slots,
        "compile_busy_share": round(compile_busy / (compile_slots * window), 3),
        "driver_cpu_share": round(driver_cpu / wall, 3),
        "search_thread_cpu_share": round(search_thread_cpu / wall, 3),
        "driver_cpu_ms_per_candidate": round(1000.0 * driver_cpu / max(1, summary.session_evaluations), 2),
        "ray_processes_cpu_share": round(ray_cpu / wall, 3),
        "machine_cpu_share": round((busy1 - busy0) / (total1 - total0), 3) if total1 > total0 else None,
        "load_average_1min": [load0, load1],  # at the start and the end (other users' work included)
        "statuses": {s: sum(r.status == s for r in rows) for s in sorted({r.status for r in rows})},
        "queue": queue,
        # proposals by emitter (the guided one draws and scores a pool of children: most of the driver's time)
        "proposed": {name: sum(p.emitters.get(name, {}).get("proposed", 0) for p in summary.problems)
                     for name in sorted({n for p in summary.problems for n in p.emitters})},
    }
    if profiler is not None:
        result["driver_profile_s"] = _profile_parts(profiler, wall)
    return result


def _warm_task(seconds: float) -> None:
    import benchmarks.loadtest  # noqa: F401 - what the compile tasks import

    time.sleep(seconds)


def run_matrix(gpus: Sequence[int], seconds: float, backend: LoadTestBackend, compile_workers: int | None,
               profile: bool, num_cpus: int, warmup_s: float = 0.0, **experiment: Any) -> list[dict[str, Any]]:
    """`run_load` for each GPU count on one embedded Ray instance (`num_cpus` logical CPUs: the compile
    pool a GPU host would have; tasks that sleep need no real core each). `experiment`: run_load's problems,
    problem_evaluations and surrogate."""
    import ray

    from evo.evaluate.ray_session import RaySession

    # the executors' own embedded start (localhost, quiet, guarded), kept up for every count, and stopped here: its
    # guard ends every Ray process when it is dropped, and a dropped guard would do so whenever it is collected,
    # under whatever runs Ray then (a later test of the same process)
    session = RaySession(num_cpus=num_cpus)
    session.start()
    try:
        # start Ray's task processes first, as a long search has them: the rates are the steady state's
        warm = ray.remote(num_cpus=1)(_warm_task)
        ray.get([warm.remote(0.5) for _ in range(int(ray.cluster_resources().get("CPU", 1)))])
        out = []
        for n in gpus:
            row = run_load(n, seconds, backend, compile_workers, warmup_s=warmup_s, **experiment)
            if profile:
                row["profiled"] = run_load(n, seconds, backend, compile_workers, profile=True, warmup_s=warmup_s,
                                           **experiment)
            print(json.dumps(row), flush=True)
            out.append(row)
        return out
    finally:
        session.close()  # the Ray it started, and its guard; nothing when Ray was up before


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.driver_load", description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 4, 8], help="fake GPU counts to load")
    ap.add_argument("--seconds", type=float, default=20.0, help="search time per count")
    ap.add_argument("--eval-s", type=float, default=H200_EVAL_S, help="seconds a fake GPU holds a candidate")
    ap.add_argument("--compile", choices=("sleep", "cpu", "none"), default="sleep",
                    help="compile stand-in: sleep (a many-core host's pool), cpu (burn this machine's), none")
    ap.add_argument("--compile-s", type=float, nargs=2, default=list(COMPILE_S), metavar=("LOW", "HIGH"),
                    help=f"seconds of a compile, drawn uniformly (default {COMPILE_S[0]} {COMPILE_S[1]})")
    ap.add_argument("--compile-workers", type=int, default=None, help="compile tasks in flight (default: CPUs)")
    ap.add_argument("--warmup", type=float, default=10.0, help="seconds searched before the rates count")
    ap.add_argument("--num-cpus", type=int, default=32, help="logical CPUs of the embedded Ray instance")
    ap.add_argument("--profile", action="store_true", help="also run each count under cProfile")
    ap.add_argument("--problems", choices=sorted(PROBLEM_SETS), default="one",
                    help="one: GEMM 4096^3 alone; llm: the ten shapes of experiments/llm_gemm.yaml in turn")
    ap.add_argument("--problem-evaluations", type=int, default=None, metavar="N",
                    help="stop each problem at N evaluations (default: only at its share of the time)")
    ap.add_argument("--no-surrogate", action="store_true", help="leave the surrogate-guided emitter out")
    ap.add_argument("--label", default="", help="a name for this set of runs in the output (e.g. before/after)")
    ap.add_argument("--note", default="", help="a remark kept with the runs (e.g. what limited this machine)")
    ap.add_argument("-o", "--out", type=Path, default=None, help="append the runs to this JSON file")
    args = ap.parse_args(argv)
    if args.problem_evaluations is not None and args.problem_evaluations < 1:
        ap.error(f"--problem-evaluations {args.problem_evaluations}: expected at least 1")
    if args.seconds <= 0 or args.warmup < 0:
        ap.error(f"--seconds {args.seconds:g} / --warmup {args.warmup:g}: expected more than 0 / at least 0")
    compile_s = None if args.compile == "none" else (min(args.compile_s), max(args.compile_s))
    backend = LoadTestBackend(args.eval_s, compile_s, args.compile == "cpu")
    runs = run_matrix(args.gpus, args.seconds, backend, args.compile_workers, args.profile, args.num_cpus,
                      args.warmup, problems=args.problems, problem_evaluations=args.problem_evaluations,
                      surrogate=not args.no_surrogate)
    if args.out is not None:
        doc = json.loads(args.out.read_text()) if args.out.exists() else {"runs": []}
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        doc["runs"].append({"label": args.label, "note": args.note, "created": created,
                            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                        "python": platform.python_version()},
                            "eval_s": args.eval_s, "compile": args.compile,
                            "compile_s": list(compile_s) if compile_s else None,
                            "compile_workers": args.compile_workers, "num_cpus": args.num_cpus, "warmup_s": args.warmup,
                            "problems": list(PROBLEM_SETS[args.problems]),
                            "problem_evaluations": args.problem_evaluations, "surrogate": not args.no_surrogate,
                            "results": runs})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
