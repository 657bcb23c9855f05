"""Starting, resuming and finishing a run: the run directory and its lock, the experiment's copy, the store and
its session metadata, the shared results database, the executor; then the search (evo.search.loop.Search) over
the experiment's problems. What the search does is evo.search.loop's; this module only sets up and tears down.
`run_experiments` searches several experiments (a model zoo's operators) in turn on one executor, started once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from evo.evaluate import Executor, make_executor
from evo.experiment.resume_check import deciding, record_resume
from evo.experiment.rundir import RunDir
from evo.experiment.runlock import RunDirError, RunLock
from evo.experiment.spec import Experiment
from evo.search.events import RunSummary
from evo.search.loop import EventCallback, Search
from evo.store.atomic_file import output_target, write_atomic
from evo.store.resumable import check_resumable, resume_changes
from evo.store.shared import chain_lookups, default_path, open_shared, refuse_own_store
from evo.store.sqlite import Store, StoreError

__all__ = ["run_experiment", "run_experiments", "StartupError"]


@dataclass
class _SharedExecutor:
    """One executor that several runs use in turn: each sets its own store as the executor's lookup."""

    executor: Executor
    started: bool = False


def run_experiment(experiment: Experiment, run_dir: str | Path, resume: bool = False,
                   on_event: EventCallback | None = None, executor: Executor | None = None,
                   allow_changes: bool = False) -> RunSummary:
    """Run (or, with `resume`, continue) `experiment` in `run_dir` (see evo.experiment.rundir for its layout).


    The run holds the directory's lock throughout (evo.experiment.runlock: a second writer is refused). A
    resume whose experiment differs in what decides results is refused unless `allow_changes`
    (evo.experiment.resume_check).
    `executor` replaces the one the experiment describes (tests, benchmarks); the caller then owns it.
    Ctrl-C ends the run early: what completed is in the store, and the summary says it was interrupted.
    """
    return _run(experiment, run_dir, resume, on_event, executor, allow_changes, None)


def run_experiments(runs: Sequence[tuple[Experiment, str | Path, bool]], on_event: EventCallback | None = None,
                    on_run: Callable[[Experiment], None] | None = None, executor: Executor | None = None
                    ) -> list[RunSummary]:
    """Search each (experiment, run directory, resume) in turn on ONE executor (one Ray instance and its workers,
    started once, shut down at the end), each in its own run directory and store, as `run_experiment` would. The
    executor is the first experiment's; every experiment must describe the same executor, evaluation and seed
    (StartupError naming the first that does not, before anything starts). `on_run(experiment)` is called before
    each run begins. Stops after a run that was interrupted; returns the summaries of the runs made. `executor`
    (not started: the first run starts it) replaces the one the experiments describe; the caller then owns it."""
    if not runs:
        return []
    first = runs[0][0]
    for exp, _, _ in runs[1:]:
        for what, mine, theirs in (("executor", exp.executor, first.executor), ("seed", exp.seed, first.seed),
                                   ("evaluation", exp.evaluation, first.evaluation)):
            if mine != theirs:
                raise StartupError(f"experiment {exp.name}: its {what} differs from {first.name}'s; experiments "
                                   "searched in one run share one executor")
    shared = _SharedExecutor(executor or make_executor(first.executor, first.evaluation, first.seed))
    summaries: list[RunSummary] = []
    try:
        for exp, run_dir, resume in runs:
            if on_run is not None:
                on_run(exp)
            summaries.append(_run(exp, run_dir, resume, on_event, None, False, shared))
            if summaries[-1].interrupted:
                break
    finally:
        if executor is None:
            shared.executor.shutdown()
    return summaries


def _run(experiment: Experiment, run_dir: str | Path, resume: bool, on_event: EventCallback | None,
         executor: Executor | None, allow_changes: bool, shared: _SharedExecutor | None) -> RunSummary:
    rd = RunDir(Path(run_dir))
    lock = RunLock(rd.path).acquire()
    try:
        return _run_locked(experiment, rd, resume, on_event, executor, allow_changes, shared)
    finally:
        lock.release()
        if lock.created and rd.path.is_dir() and not any(rd.path.iterdir()):
            rd.path.rmdir()  # a run that never started leaves no directory behind


def _run_locked(experiment: Experiment, rd: RunDir, resume: bool, on_event: EventCallback | None,
                executor: Executor | None, allow_changes: bool, shared_executor: _SharedExecutor | None
                ) -> RunSummary:
    if rd.exists() and not resume:
        raise RunDirError(f"{rd.path} already holds a run: resume it, or choose another name or output folder")
    if resume and not rd.exists():
        raise RunDirError(f"nothing to resume: {rd.store} does not exist")
    import operators

    operator = operators.get(experiment.operator, dict(experiment.genome))
    changes: list[str] = []
    if experiment.memory.enabled:  # before anything is written: a results database that is the store itself
        refuse_own_store(default_path(experiment.memory.db, rd.path), rd.store, RunDirError)
    try:  # the copy is written atomically; a FIFO or a device under its name is refused, never read or replaced
        output_target(rd.experiment)
    except OSError as e:
        raise RunDirError(f"cannot write {rd.experiment}: {e.strerror or e}") from None
    previous = rd.experiment.read_text() if rd.experiment.exists() else None
    if resume:
        changes = _check_resumable(rd, experiment, allow_changes)
    if experiment.source and experiment.source != previous:
        write_atomic(rd.experiment, experiment.source)
    store = Store(rd.store)
    memory = experiment.memory
    # the platform's cache, else this run's directory; an unusable one is a notice, never the end of the run
    shared, notice = open_shared(default_path(memory.db, rd.path)) if memory.enabled else (None, "")
    owned = executor is None and shared_executor is None
    try:
        if shared_executor is not None:  # served by run_experiments' executor: this run's store is its lookup
            executor = shared_executor.executor
            executor.lookup = store.lookup
        elif executor is None:
            executor = make_executor(experiment.executor, experiment.evaluation, experiment.seed, store.lookup,
                                     ray_log=str(rd.ray_log))
        if shared is not None and memory.reuse:  # the run's own store first, then what earlier runs measured
            executor.lookup = chain_lookups(executor.lookup, shared.lookup)
        if shared_executor is None or not shared_executor.started:
            try:
                executor.start()
            except Exception as e:
                if owned or shared_executor is not None:
                    executor.shutdown()
                raise StartupError(f"cannot start the {experiment.executor.kind} executor: {e}") from e
            if shared_executor is not None:
                shared_executor.started = True
    except BaseException:
        store.close()
        if shared is not None:
            shared.close()
        if not resume:  # leave nothing behind that would block a retry
            for path in (rd.store, Path(f"{rd.store}-wal"), Path(f"{rd.store}-shm"), rd.experiment, rd.ray_log):
                path.unlink(missing_ok=True)
        elif previous is not None and previous != experiment.source:
            write_atomic(rd.experiment, previous)  # the resume did not happen: the copy describes the run again
        raise
    with store:
        session = int(store.meta("sessions", 0)) + 1
        store.set_meta("sessions", session)
        if resume:
            record_resume(store, session, changes, previous if previous != experiment.source else None)
        store.set_meta("experiment", experiment.name)
        store.set_meta("operator", experiment.operator)
        store.set_meta("seed", experiment.seed)
        store.set_meta("deciding", deciding(experiment))
        store.set_meta("problems", [p.key for p in experiment.problems])
        store.set_meta("executor", experiment.executor.kind)
        try:
            store.set_meta("target", {k: v for k, v in asdict(executor.target).items() if k != "extra"})
            search = Search(experiment, operator, store, executor, on_event, run_id=f"{experiment.name}#{session}",
                            shared=shared, notices=[notice] if notice else [])
            summary = search.run()
        finally:
            if owned:
                executor.shutdown()
            if shared is not None:
                shared.close()
    return RunSummary(experiment.name, str(rd.path), summary.problems, summary.interrupted,
                      summary.session_evaluations, summary.elapsed_s, experiment.executor.kind == "smoke")


class StartupError(RuntimeError):
    """The search could not start: the executor failed (no GPU visible, Ray cannot start, ...) or a resumed run
    does not match the experiment. Nothing was searched."""


def _check_resumable(rd: RunDir, experiment: Experiment, allow_changes: bool = False) -> list[str]:
    """Refuse a store that cannot be resumed, or a resume that would be another search (evo.store.resumable; `evo
    run` made the same checks before importing this module); returns the differences allowed by `allow_changes`."""
    check_resumable(rd.store, StoreError)  # empty, foreign, damaged or locked: refused before it is opened to write
    return resume_changes(rd.store, experiment, allow_changes, StartupError)
