"""The search: asynchronous steady-state MAP-Elites over the problems of an experiment, one archive each.

Steady state, no generations: the search keeps `executor.slots` jobs in flight; each finished evaluation
is stored, offered to the archive, and immediately replaced by a new child varied from the archive as it
is now. While GPUs check and time, the CPU side renders and compiles the next jobs, so a GPU that frees up
gets a compiled job at once.

Problems are searched in order; the next one's first population starts while the one before drains its last
candidates (evo.search.handover), so that the GPUs do not wait for its first compiles. The first population of a
problem is the elites of the nearest problems earlier runs measured on this GPU model and versions (the shared
results database, evo.store.shared), the elites of the problems already searched (with `transfer`), both repaired
for this problem, the family's seeds, and `initial_random` random valid genomes. After it, the experiment's
emitters propose the children, a bandit scheduler choosing which one proposes next from the archive improvements
each caused (evo.search.emitters; its counts restart with each session). A problem's search stops at the first
budget reached: evaluations, wall time, stagnation (evaluations since the best last rose beyond the noise margin),
or `sol` (the elite's share of the problem's speed-of-light floor, evo.evaluate.roofline, when the workers measured
one).

The store is the checkpoint. Every evaluation is committed as it arrives, and everything else is rebuilt
from it on resume: the archive (by replaying the rows in order, exactly as it was built live), the
evaluation count, the stagnation counter, the genomes already tried. A resumed problem continues with a
random stream derived from (seed, problem, evaluations so far), so resuming is deterministic too. Beside each
problem's clock (`wall_s:<problem>`) the store keeps the search process's CPU seconds (`cpu_s:`) and how full
the executor's pipeline was in the latest session (`queue:`, evo.evaluate.occupancy).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from evo.archive import AddStatus, Elite, GridArchive
from evo.evaluate import Candidate, Executor, make_executor
from evo.evaluate.roofline import Floor, floor
from evo.experiment.resume_check import deciding, record_resume
from evo.experiment.rundir import RunDir
from evo.experiment.runlock import RunDirError, RunLock
from evo.experiment.spec import Experiment
from evo.mutators import MutatorMix
from evo.problem import Problem
from evo.search import emitters as emitting
from evo.search.events import ProblemSummary, RunSummary, SearchEvent
from evo.search.handover import NextProblem
from evo.search.selection import get as get_selection
from evo.search.variation import Proposal, Variation
from evo.store.atomic_file import write_atomic
from evo.store.record import Evaluation
from evo.store.resumable import check_resumable, resume_changes
from evo.store.shared import SharedResults, chain_lookups, default_path, open_shared
from evo.store.sqlite import Store, StoreError

__all__ = ["run_experiment", "Search", "EventCallback", "StartupError"]

EventCallback = Callable[[SearchEvent], None]
_SAVE_CLOCK_S = 5.0  # how often the time spent on a problem is saved (lost on a kill: at most this much)


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
    rd = RunDir(Path(run_dir))
    lock = RunLock(rd.path).acquire()
    try:
        return _run_locked(experiment, rd, resume, on_event, executor, allow_changes)
    finally:
        lock.release()
        if lock.created and rd.path.is_dir() and not any(rd.path.iterdir()):
            rd.path.rmdir()  # a run that never started leaves no directory behind


def _run_locked(experiment: Experiment, rd: RunDir, resume: bool, on_event: EventCallback | None,
                executor: Executor | None, allow_changes: bool) -> RunSummary:
    if rd.exists() and not resume:
        raise RunDirError(f"{rd.path} already holds a run: resume it, or choose another name or output folder")
    if resume and not rd.exists():
        raise RunDirError(f"nothing to resume: {rd.store} does not exist")
    import operators

    operator = operators.get(experiment.operator, dict(experiment.genome))
    changes: list[str] = []
    previous = rd.experiment.read_text() if rd.experiment.exists() else None
    if resume:
        changes = _check_resumable(rd, experiment, allow_changes)
    if experiment.source and experiment.source != previous:
        write_atomic(rd.experiment, experiment.source)
    store = Store(rd.store)
    memory = experiment.memory
    # the platform's cache, else this run's directory; an unusable one is a notice, never the end of the run
    shared, notice = open_shared(default_path(memory.db, rd.path)) if memory.enabled else (None, "")
    owned = executor is None
    try:
        if executor is None:
            executor = make_executor(experiment.executor, experiment.evaluation, experiment.seed, store.lookup)
        if shared is not None and memory.reuse:  # the run's own store first, then what earlier runs measured
            executor.lookup = chain_lookups(executor.lookup, shared.lookup)
        try:
            executor.start()
        except Exception as e:
            if owned:
                executor.shutdown()
            raise StartupError(f"cannot start the {experiment.executor.kind} executor: {e}") from e
    except BaseException:
        store.close()
        if shared is not None:
            shared.close()
        if not resume:  # leave nothing behind that would block a retry
            for path in (rd.store, Path(f"{rd.store}-wal"), Path(f"{rd.store}-shm"), rd.experiment):
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


class Search:
    """One session of an experiment's search over its problems, on a started executor."""

    def __init__(self, experiment: Experiment, operator: object, store: Store, executor: Executor,
                 on_event: EventCallback | None = None, run_id: str | None = None,
                 shared: SharedResults | None = None, notices: Sequence[str] = ()) -> None:
        run_id = run_id or f"{experiment.name}#1"
        if not run_id.startswith(f"{experiment.name}#"):
            raise ValueError(f"run id {run_id!r} must be '<experiment name>#<session>'")
        self.experiment = experiment
        self.operator = operator
        self.family = operator.family  # type: ignore[attr-defined]
        self.unit = getattr(operator, "throughput_unit", "")
        self.store = store
        self.executor = executor
        self.on_event = on_event
        self.run_id = run_id
        self.mutators = MutatorMix(experiment.mutators)
        self.selection = get_selection(experiment.selection)
        self.margin = experiment.evaluation.noise_margin
        self.shared = shared  # the results database shared across runs (evo.store.shared), or None
        self._notices = list(notices)  # one-line messages for the user, shown once the search has begun
        self.emitters = [emitting.get(e.name, dict(e.settings)) for e in experiment.emitters]
        self.scheduler: emitting.BanditScheduler | None = None  # per problem
        self._arm: dict[int, int] = {}  # ticket -> the scheduler's emitter index
        self._floor: Floor | None = None  # the current problem's speed-of-light floor
        self._ticket = 0
        self._session_evaluations = 0
        self._busy = -1
        self._next: NextProblem | None = None  # the next problem, when its first population has started
        self.archives: dict[str, GridArchive] = {}  # by problem key, as searched in this session

    def run(self) -> RunSummary:
        t0 = time.monotonic()
        archives = self.archives
        summaries: list[ProblemSummary] = []
        interrupted = False
        for i, problem in enumerate(self.experiment.problems):
            transfer = self._transfer_elites(archives) if self.experiment.transfer else []
            archive, summary = self.search_problem(i, problem, transfer)
            archives[problem.key] = archive
            summaries.append(summary)
            if summary.reason == "interrupted":
                interrupted = True
                break
        return RunSummary(self.experiment.name, str(self.store.path.parent), tuple(summaries), interrupted,
                          self._session_evaluations, time.monotonic() - t0)

    # -- one problem ----------------------------------------------------------------------------------
    def search_problem(self, index: int, problem: Problem, transfer: Sequence[Elite] = ()
                       ) -> tuple[GridArchive, ProblemSummary]:
        exp = self.experiment
        head, self._next = (self._next, None) if self._next is not None and self._next.index == index else (None, None)
        archive = GridArchive.for_problem(self.operator, problem, exp.descriptors, self.margin)
        rows = self._rows(problem)
        archive.add(rows)
        seen = {r.genome_hash for r in rows} | (head.seen if head else set())
        clock_key = f"wall_s:{problem.key}"
        spent = float(self.store.meta(clock_key, 0.0))
        started = time.monotonic()
        elapsed = lambda: spent + time.monotonic() - started  # noqa: E731
        # the search process's own CPU time beside the clock (its share says whether the driver keeps up)
        cpu_spent, cpu_started = float(self.store.meta(f"cpu_s:{problem.key}", 0.0)), time.process_time()
        if self.executor.occupancy is not None:
            self.executor.occupancy.restart()

        def save_clock() -> None:
            self.store.set_meta(clock_key, elapsed())
            self.store.set_meta(f"cpu_s:{problem.key}", round(cpu_spent + time.process_time() - cpu_started, 3))
            if self.executor.occupancy is not None:  # this session's, for the problem
                self.store.set_meta(f"queue:{problem.key}", self.executor.occupancy.summary())

        self._floor, self.scheduler = self._problem_floor(problem), None
        stop = self._stop_reason(archive, spent)
        if stop is not None and head is None:  # finished in an earlier session
            self._emit("problem_done", index, problem, archive, spent, reason=stop)
            return archive, self._summary(problem, archive, stop)

        if head is not None:  # its first population started while the problem before it drained
            variation, queue, mine = head.variation, head.queue, head.in_flight
        else:
            variation, queue, mine = self._first_population(index, problem, transfer, seen)
        rng = self._rng(index, 1, archive.evaluations)
        self.scheduler = emitting.get_scheduler(exp.scheduler, self.emitters)
        prefix = f"{exp.name}#"
        ctx = emitting.EmitContext(problem, archive, variation, seen, rng, seed=exp.seed, rows=lambda: [
            r for r in self.store.iter() if r.run_id.startswith(prefix) and r.operator == problem.operator])
        self._emit("problem_start", index, problem, archive, elapsed())
        while self._notices:
            self._emit("message", index, problem, archive, elapsed(), message=self._notices.pop(0))
        if exp.budget.sol is not None and self._floor is None:
            self._emit("message", index, problem, archive, elapsed(), message=(
                f"budget.sol {exp.budget.sol} is not used for {problem.key}: no speed-of-light floor on "
                f"{self.executor.infos[0].gpu if self.executor.infos else 'this executor'} (a smoke run's fitness "
                f"is not a timing; a GPU run measures the copy bandwidth at start-up)"))
        for job, ev in head.early if head else ():
            self._record(index, problem, archive, job, ev, elapsed())
        saved_at = time.monotonic()
        cancelled = False
        budget = exp.budget.evaluations
        try:
            while True:
                if stop is None:
                    stop = self._stop_reason(archive, elapsed())
                if stop is None:
                    while self.executor.in_flight < self.executor.slots and (
                            budget is None or archive.evaluations + mine < budget):
                        self._ticket += 1
                        if queue:
                            proposal, emitter = queue.popleft(), emitting.INITIAL
                        else:
                            arm = self.scheduler.choose(rng)
                            proposal, emitter = self.emitters[arm].propose(ctx), self.emitters[arm].name
                            self._arm[self._ticket] = arm
                        seen.add(proposal.genome.hash)
                        self.executor.submit(Candidate(problem, proposal.genome, self.operator, proposal.origin,
                                                       proposal.parents, self._ticket, emitter))
                        mine += 1
                elif not cancelled and self._next is None:  # (the next problem's first candidates are kept)
                    for cand in self.executor.cancel_waiting():
                        mine -= 1
                        if cand.ticket in self._arm:
                            self.scheduler.release(self._arm.pop(cand.ticket))
                    cancelled = True
                if mine == 0:
                    break
                if stop is not None or (budget is not None and archive.evaluations + mine >= budget):
                    self._hand_over(index, archive)  # nothing more to submit here: the next problem may start
                for job, ev in self.executor.poll(timeout_s=1.0):
                    if job.problem.key != problem.key and self._next is not None:
                        self._next.arrived(job, ev)
                        continue
                    self._record(index, problem, archive, job, ev, elapsed())
                    mine -= 1
                self._workers_changed(index, problem, archive, elapsed())
                if time.monotonic() - saved_at > _SAVE_CLOCK_S:
                    save_clock()
                    saved_at = time.monotonic()
        except KeyboardInterrupt:
            stop = "interrupted"
            try:  # keep what completed while we were interrupted (the next problem's results are dropped)
                for job, ev in self.executor.poll(timeout_s=0):
                    if job.problem.key == problem.key:
                        self._record(index, problem, archive, job, ev, elapsed())
            except Exception:  # the executor may be half torn down by the same signal
                pass
        save_clock()
        summary = self._summary(problem, archive, stop or "evaluations")
        if stop != "interrupted":
            self.store.set_meta(f"summary:{problem.key}", summary.as_dict())
        self._emit("problem_done", index, problem, archive, elapsed(), reason=summary.reason)
        return archive, summary

    def _first_population(self, index: int, problem: Problem, transfer: Sequence[Elite], seen: set[str]
                          ) -> tuple[Variation, deque[Proposal], int]:
        """The problem's variation, its first population (none of it submitted yet: 0 in flight)."""
        exp = self.experiment
        variation = Variation(self.family, problem, self.executor.target, self.mutators, self.selection)
        first = variation.initial(self._rng(index, 0), exp.initial_random, transfer, seen, self._remembered(problem),
                                  exp.seeds)
        return variation, deque(first), 0

    def _hand_over(self, index: int, archive: GridArchive) -> None:
        """Problem `index` submits nothing more: the next problem's first population takes the free slots
        (evo.search.handover), unless it finished in an earlier session."""
        problems = self.experiment.problems
        if self._next is None:
            if index + 1 >= len(problems) or self.executor.in_flight >= self.executor.slots:
                return
            problem = problems[index + 1]
            if self.store.meta(f"summary:{problem.key}") is not None:
                return
            # the elites as they are now (the last few results of problem `index` are still to come)
            searched = {**self.archives, problems[index].key: archive}
            transfer = self._transfer_elites(searched) if self.experiment.transfer else []
            seen = {r.genome_hash for r in self._rows(problem)}
            variation, queue, _ = self._first_population(index + 1, problem, transfer, seen)
            self._next = NextProblem(index + 1, problem, variation, queue, seen)
        head = self._next
        while head.queue and self.executor.in_flight < self.executor.slots:
            proposal = head.queue.popleft()
            self._ticket += 1
            head.seen.add(proposal.genome.hash)
            head.in_flight += 1
            self.executor.submit(Candidate(head.problem, proposal.genome, self.operator, proposal.origin,
                                           proposal.parents, self._ticket, emitting.INITIAL))

    def _record(self, index: int, problem: Problem, archive: GridArchive, job: Candidate, ev: Evaluation,
                elapsed: float) -> None:
        if ev.problem_key != problem.key or ev.genome_hash != job.genome.hash:
            raise RuntimeError(f"executor returned an evaluation of {ev.problem_key} {ev.genome_hash} for job "
                               f"{job.ticket} ({problem.key} {job.genome.hash})")
        ev.origin, ev.parents, ev.run_id, ev.emitter = job.origin, list(job.parents), self.run_id, job.emitter
        # judged by the experiment's objective: the worker's rows are already; failures made outside one are now
        ev.objective = ev.judged_by(self.experiment.evaluation.objective).objective
        self.store.add(ev)  # first the store, then the archive: the order from_store replays
        if self.shared is not None:
            self.shared.record(ev)
        (result,) = archive.add([ev])
        arm = self._arm.pop(job.ticket, None)
        if arm is not None and self.scheduler is not None:
            self.scheduler.credit(arm, result.status > AddStatus.NOT_ADDED)
        self._session_evaluations += 1
        self._emit("evaluation", index, problem, archive, elapsed, evaluation=ev, added=result.status)

    def _rows(self, problem: Problem) -> list[Evaluation]:
        """This experiment's stored evaluations of `problem`, in store order. A run directory's store holds
        one experiment only; a store shared by several (a benchmark comparing searches) is told apart by the
        run ids, which are "<experiment name>#<session>"."""
        prefix = f"{self.experiment.name}#"
        objective = self.experiment.evaluation.objective  # earlier sessions' rows judged as this one judges
        return [r.judged_by(objective) for r in self.store.iter(problem.key) if r.run_id.startswith(prefix)]

    def _stop_reason(self, archive: GridArchive, elapsed: float) -> str | None:
        b = self.experiment.budget
        if b.evaluations is not None and archive.evaluations >= b.evaluations:
            return "evaluations"
        if b.wall_s is not None and elapsed >= b.wall_s:
            return "wall_s"
        if b.stagnation is not None and archive.evaluations - archive.best_index >= b.stagnation:
            return "stagnation"
        share = self._sol_share(archive)
        if b.sol is not None and share is not None and share >= b.sol:
            return "sol"
        return None

    # -- speed of light and memory ----------------------------------------------------------------------
    def _problem_floor(self, problem: Problem) -> Floor | None:
        """The problem's floor on the first worker's GPU (None without a measured copy bandwidth: smoke runs),
        kept in the store's metadata for status and the report."""
        info = self.executor.infos[0] if self.executor.infos else None
        found = floor(self.operator, problem, info.gpu, info.copy_GBps) if info is not None else None
        self.store.set_meta(f"floor:{problem.key}", asdict(found) if found else None)
        return found

    def _sol_share(self, archive: GridArchive) -> float | None:
        best = archive.best
        # the speed of light is a floor on GPU time, whatever clock the fitness is on (the call clock keeps inputs in
        # L2 between calls, so a memory-bound kernel's call time can even pass the floor)
        return self._floor.share(best.median_ms) if self._floor is not None and best is not None else None

    def _remembered(self, problem: Problem) -> list[Evaluation]:
        """Elites of the nearest problems earlier runs measured on this GPU model and versions."""
        info = self.executor.infos[0] if self.executor.infos else None
        if self.shared is None or info is None or not self.experiment.memory.seed:
            return []
        return self.shared.nearest_elites(problem, info.gpu, info.versions, self.experiment.memory.seed)

    def _rng(self, problem_index: int, stream: int, evaluations: int = 0) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.experiment.seed, problem_index, stream,
                                                             evaluations]))

    def _transfer_elites(self, archives: dict[str, GridArchive]) -> list[Elite]:
        """Elites of the problems searched so far, best ratio to the baseline first (ratios compare across
        shapes where throughputs do not)."""
        elites = [e for a in archives.values() for e in a.elites()]
        return sorted(elites, key=lambda e: (-(e.ratio or 0.0), -e.objective, e.genome_hash))

    # -- reporting ------------------------------------------------------------------------------------
    def _workers_changed(self, index: int, problem: Problem, archive: GridArchive, elapsed: float) -> None:
        if self.executor.busy != self._busy:
            self._busy = self.executor.busy
            self._emit("workers", index, problem, archive, elapsed)

    def _emit(self, kind: str, index: int, problem: Problem, archive: GridArchive, elapsed: float,
              **extra: object) -> None:
        if self.on_event is None:
            return
        best = archive.best
        self.on_event(SearchEvent(
            kind=kind, problem_key=problem.key, problem_index=index, problems=len(self.experiment.problems),
            evaluations=archive.evaluations, budget=self.experiment.budget.evaluations,
            best=best.objective if best else None, best_ratio=best.ratio if best else None, unit=self.unit,
            failures={k: n for k, n in sorted(archive.status_counts.items()) if k != "ok"},
            busy_workers=self.executor.busy, total_workers=self.executor.workers, coverage=archive.coverage,
            qd_score=archive.qd_score, elapsed_s=elapsed, sol_share=self._sol_share(archive),
            **extra))  # type: ignore[arg-type]

    def _summary(self, problem: Problem, archive: GridArchive, reason: str) -> ProblemSummary:
        arms = self.scheduler.arms if self.scheduler else []
        return ProblemSummary.of(problem.key, archive, reason, self.unit, self.margin, self._rows(problem),
                                 self._sol_share(archive), {a.name: {"proposed": a.proposed,
                                                                     "improvements": a.improvements} for a in arms})
