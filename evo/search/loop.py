"""The search: asynchronous steady-state MAP-Elites over the problems of an experiment, one archive each.

Steady state, no generations: the search keeps `executor.slots` jobs in flight; each finished evaluation
is stored, offered to the archive, and immediately replaced by a new child varied from the archive as it
is now. While GPUs check and time, the CPU side renders and compiles the next jobs, so a GPU that frees up
gets a compiled job at once.

Problems are searched in order; the next one's first population starts while the one before drains its last
candidates (evo.search.handover), so that the GPUs do not wait for its first compiles. The first population of a
problem takes in turn the elites of the nearest problems earlier runs measured on this GPU model and versions (the
shared results database, evo.store.shared), the family's seeds and the elites of the problems already searched
(with `transfer`, nearest shapes first), the elites repaired for this problem, then `initial_random` random valid
genomes (evo.search.variation). After it, the experiment's emitters propose the children, a bandit scheduler
choosing which one proposes next from the archive improvements each caused (evo.search.emitters; its counts
restart with each session). A problem's search stops at the first budget reached: evaluations, wall time,
stagnation (evaluations since the best last rose beyond the noise margin), or `sol` (the elite's share of the
problem's speed-of-light floor, evo.evaluate.roofline, when the workers measured one).

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

import numpy as np

from evo.archive import AddStatus, Elite, GridArchive
from evo.evaluate import Candidate, Executor
from evo.evaluate.roofline import Floor, floor
from evo.experiment.spec import Experiment
from evo.mutators import MutatorMix
from evo.problem import Problem, shape_distance
from evo.search import emitters as emitting
from evo.search.budget import ProblemClock, stop_reason
from evo.search.events import ProblemSummary, RunSummary, SearchEvent
from evo.search.handover import NextProblem
from evo.search.selection import get as get_selection
from evo.search.variation import Proposal, Variation
from evo.store.record import Evaluation
from evo.store.shared import SharedResults
from evo.store.sqlite import Store

__all__ = ["Search", "EventCallback"]

EventCallback = Callable[[SearchEvent], None]
_SAVE_CLOCK_S = 5.0  # how often the time spent on a problem is saved (lost on a kill: at most this much)


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
        self._clock = ProblemClock()  # the current problem's (evo.search.budget)
        self._held = False  # the floor in evaluations holds back a limit the current problem reached
        self._exhausted = False  # the current problem's emitters proposed a genome already tried
        self.archives: dict[str, GridArchive] = {}  # by problem key, as searched in this session

    def run(self) -> RunSummary:
        t0 = time.monotonic()
        archives = self.archives
        summaries: list[ProblemSummary] = []
        interrupted = False
        for i, problem in enumerate(self.experiment.problems):
            transfer = self._transfer_elites(archives, problem) if self.experiment.transfer else []
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
        early_ids = {ev.id for _, ev in head.early} if head else set()
        rows = [r for r in self._rows(problem) if r.id not in early_ids]  # the early rows are replayed below
        archive.add(rows)
        seen = {r.genome_hash for r in rows} | (head.seen if head else set())
        clock_key = f"wall_s:{problem.key}"
        # wall_s counts from the first measured candidate: an early one of the hand-over, else one still to come
        self._clock = ProblemClock(float(self.store.meta(clock_key, 0.0)), head.first_measured_at if head else None)
        self._held = self._exhausted = False
        spent, elapsed = self._clock.spent, self._clock.elapsed
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
        for job, ev in head.early if head else ():  # stored as they came; into the archive now, in that order
            self._record(index, problem, archive, job, ev, elapsed(), stored=True)
        saved_at = time.monotonic()
        cancelled = False
        try:
            while True:
                if stop is None:
                    stop = self._stop_reason(archive, elapsed())
                # what this problem may reach with what is in flight: its floor while the floor holds a limit back
                budget = exp.budget.floor if self._held else exp.budget.evaluations
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
                            self._exhausted |= proposal.genome.hash in seen  # no untried genome was found
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
                        self._store(job, ev)  # stored now: nothing completed is lost if the run ends here
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
            try:  # keep what completed while we were interrupted
                for job, ev in self.executor.poll(timeout_s=0):
                    if job.problem.key == problem.key:
                        self._record(index, problem, archive, job, ev, elapsed())
                    elif self._next is not None:
                        self._store(job, ev)
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
            transfer = self._transfer_elites(searched, problem) if self.experiment.transfer else []
            rows = self._rows(problem)
            seen = {r.genome_hash for r in rows}
            variation, queue, _ = self._first_population(index + 1, problem, transfer, seen)
            budget = self.experiment.budget.evaluations  # a first population larger than what is left of it
            room = None if budget is None else max(0, budget - len(rows))  # must not overrun it
            self._next = NextProblem(index + 1, problem, variation, queue, seen, room=room)
        head = self._next
        while head.may_submit() and self.executor.in_flight < self.executor.slots:
            proposal = head.queue.popleft()
            self._ticket += 1
            head.seen.add(proposal.genome.hash)
            head.in_flight += 1
            self.executor.submit(Candidate(head.problem, proposal.genome, self.operator, proposal.origin,
                                           proposal.parents, self._ticket, emitting.INITIAL))

    def _store(self, job: Candidate, ev: Evaluation) -> None:
        """Stamp `ev` with its job's provenance and this run, and store it (and share it)."""
        if ev.problem_key != job.problem.key or ev.genome_hash != job.genome.hash:
            raise RuntimeError(f"executor returned an evaluation of {ev.problem_key} {ev.genome_hash} for job "
                               f"{job.ticket} ({job.problem.key} {job.genome.hash})")
        ev.origin, ev.parents, ev.run_id, ev.emitter = job.origin, list(job.parents), self.run_id, job.emitter
        # judged by the experiment's objective: the worker's rows are already; failures made outside one are now
        ev.objective = ev.judged_by(self.experiment.evaluation.objective).objective
        # the kernel's text is kept once per distinct kernel: what export and bench serve is what was measured
        source = job.source if job.source and job.source_hash == ev.source_hash else None
        self.store.add(ev, source)
        if self.shared is not None:
            self.shared.record(ev, source)

    def _record(self, index: int, problem: Problem, archive: GridArchive, job: Candidate, ev: Evaluation,
                elapsed: float, stored: bool = False) -> None:
        """Store `ev` (unless it is already: a hand-over's early row), then add it to the archive: the order
        from_store replays."""
        if job.problem.key != problem.key:
            raise RuntimeError(f"job {job.ticket} of {job.problem.key} recorded for {problem.key}")
        if not stored:
            self._store(job, ev)
        (result,) = archive.add([ev])
        self._clock.note(ev, archive.evaluations, self.experiment.budget.floor)
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
        """Why the current problem's search stops now, or None (evo.search.budget: the floor may hold wall time
        and stagnation back; it sets `_held`)."""
        reason, self._held = stop_reason(self.experiment.budget, archive.evaluations, archive.best_index, elapsed,
                                         self._sol_share(archive), self._exhausted)
        return reason

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

    def _transfer_elites(self, archives: dict[str, GridArchive], problem: Problem) -> list[Elite]:
        """Elites of the problems searched so far for `problem`: those of the nearest shapes first
        (evo.problem.shape_distance: a decode GEMM's tiles suit another decode GEMM, not a prefill one), then the
        best ratio to the baseline (ratios compare across shapes where throughputs do not)."""
        sizes = {p.key: p.sizes for p in self.experiment.problems}
        ranked = [(round(shape_distance(sizes[key], problem.sizes), 6), e)  # (rounded: equal distances tie)
                  for key, a in archives.items() for e in a.elites()]
        ranked.sort(key=lambda de: (de[0], -(de[1].ratio or 0.0), -de[1].objective, de[1].genome_hash))
        return [e for _, e in ranked]

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
                                                                     "improvements": a.improvements} for a in arms},
                                 exhausted=self._exhausted)
