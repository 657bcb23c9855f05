"""The search of one problem, as an object with small steps: fill the free slots, take a result, drain.

A session (evo.search.loop.Search) searches its problems in order, one ProblemSearch each. `run` starts the problem
(its archive rebuilt from the store, its clock, its floor), turns `step` until nothing of it is in flight, and
closes it (its clock and summary saved). A
step fills the executor's free slots with the first population, then with the emitters' children, while the
budget allows; once a budget stops the problem it cancels what still waits and hands over (below); then it takes
the results that came back, each stored and added to the archive as it arrives.

The hand-over. A problem that will submit nothing more (its budget is reached, or every evaluation it may still make
is in flight) keeps its last candidates in flight for a compile and a measurement. Searched strictly one after the
other, the next problem's first candidates would only then be rendered and compiled, and every GPU would wait for
them, the more often the faster the problems go (benchmarks.driver_load, two simulated GPUs, the ten LLM GEMMs at 150
evaluations each: busy 96% before, 98.6% with this and the threaded surrogate refit, on a quiet 2-core box;
reports/gpu/driver-load-multiproblem-simulated.json). So the session starts the next problem's search ahead
(`ahead`: elites transferred from the archives as they are at that moment, the family's seeds, random genomes) and
lets it fill the free slots of the window as soon as the current problem stops submitting. Started ahead, it submits
its first population only, no more than its budget leaves (`room`); its results are stored as they arrive (a crash
or a kill loses none of them) and kept, to enter its archive in the order they came once its `run` begins. Only the
first population starts early: the emitters, which learn from the problem's own archive, wait for it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from evo.archive import AddStatus, Elite, GridArchive
from evo.evaluate.candidate import Candidate
from evo.problem import Problem
from evo.search import emitters as emitting
from evo.search.budget import ProblemClock, stop_reason
from evo.search.events import ProblemSummary, SearchEvent
from evo.store.record import Evaluation

# the session is an evo.search.loop.Search, the first population's variation an evo.search.variation.Variation and
# its proposals Proposals, named in comments only: this module adds no floor under the loop

__all__ = ["ProblemSearch", "SAVE_CLOCK_S"]

SAVE_CLOCK_S = 5.0  # how often the time spent on a problem is saved (lost on a kill: at most this much)


class ProblemSearch:
    """One problem's search in a session: its archive, budget, proposals in flight and emitter scheduler."""

    def __init__(self, session: Any, index: int, problem: Problem) -> None:
        self.session, self.index, self.problem = session, index, problem
        self.variation: Any = None  # the first population's Variation (made by `run`, or by `ahead`)
        self.queue: deque[Any] = deque()  # the first population's proposals not submitted yet
        self.seen: set[str] = set()  # genomes already tried or submitted for this problem
        self.in_flight = 0  # submitted, not yet come back
        self.started_ahead = False
        self.early: list[tuple[Candidate, Evaluation]] = []  # stored before its run began, in the order they came
        self.room: int | None = None  # started ahead: how many it may submit before its run (its budget less rows)
        self.first_measured_at: float | None = None  # time.monotonic() of its first row a worker measured, if early
        self.running = False
        self.stop: str | None = None  # why it stops (once a budget is reached), "interrupted" on Ctrl-C
        self.cancelled = False  # what waited in the executor was cancelled once it stopped
        self.held = False  # the floor in evaluations holds back a limit it reached
        self.exhausted = False  # its emitters proposed a genome already tried
        self.arms: dict[int, int] = {}  # ticket -> the scheduler's emitter index
        self.scheduler: emitting.BanditScheduler | None = None
        self.floor: Any = None  # its speed-of-light floor (evo.evaluate.roofline.Floor), or None
        self.clock = ProblemClock()
        self.archive: GridArchive | None = None

    @classmethod
    def ahead(cls, session: Any, index: int, problem: Problem, searched: dict[str, GridArchive]) -> ProblemSearch:
        """The search of problem `index` started before its turn: its first population, drawn with the elites of the
        archives `searched` as they are now (the last results of the problem before it are still to come)."""
        ahead = cls(session, index, problem)
        exp = session.experiment
        transfer = session._transfer_elites(searched, problem) if exp.transfer else []
        rows = session.problem_rows(problem)
        ahead.seen = {r.genome_hash for r in rows}
        ahead.variation, ahead.queue = session.first_population(index, problem, transfer, ahead.seen)
        budget = exp.budget.evaluations  # a first population larger than what is left of it must not overrun it
        ahead.room = None if budget is None else max(0, budget - len(rows))
        ahead.started_ahead = True
        return ahead

    # -- the run --------------------------------------------------------------------------------------
    def run(self, transfer: Sequence[Elite] = ()) -> tuple[GridArchive, ProblemSummary]:
        """Search the problem until a budget stops it (or Ctrl-C), draining what it has in flight; its archive and
        summary. A problem finished in an earlier session only reports it."""
        if not self.start(transfer):
            return self.archive, self._summary(self.stop)
        try:
            while self.step():
                pass
        except KeyboardInterrupt:
            self.stop = "interrupted"
            self._keep_what_came_back()
        return self.close()

    def start(self, transfer: Sequence[Elite] = ()) -> bool:
        """Open the problem: its archive rebuilt from the store, its clock and floor, its first population (unless
        started ahead: then its early rows go into the archive); False when it finished in an earlier session
        (reported as done)."""
        self._open()
        if self.stop is not None and not self.started_ahead:  # finished in an earlier session
            self._emit("problem_done", self.clock.spent, reason=self.stop)
            return False
        if not self.started_ahead:
            self.variation, self.queue = self.session.first_population(self.index, self.problem, transfer, self.seen)
        self._begin()
        return True

    def step(self) -> bool:
        """One turn: fill the free slots (once stopped: cancel what still waits), hand over when nothing more will
        be submitted, take the results that came back. False when nothing of the problem is left in flight."""
        s = self.session
        if self.stop is None:
            self.stop = self._stop_reason(self.elapsed())
        if self.stop is None:
            self.fill_slots()
        elif not self.cancelled and s._next is None:  # (the next problem's first candidates are kept)
            self.cancel_waiting()
        if self.in_flight == 0:
            return False
        budget = self._budget()
        if self.stop is not None or (budget is not None and self.archive.evaluations + self.in_flight >= budget):
            s.hand_over(self)  # nothing more to submit here: the next problem may start
        for job, ev in s.executor.poll(timeout_s=1.0):
            self.take(job, ev)
        self._workers_changed()
        if time.monotonic() - self._saved_at > SAVE_CLOCK_S:
            self._save_clock()
        return True

    # -- the steps ------------------------------------------------------------------------------------
    def fill_slots(self) -> None:
        """Submit proposals while the executor has free slots and the problem may submit more: the first population
        first, then the emitters' children (not before its run: started ahead, the first population only)."""
        ex = self.session.executor
        while ex.in_flight < ex.slots and self._may_submit():
            self._submit()

    def take(self, job: Candidate, ev: Evaluation) -> None:
        """A result came back: into the archive (stored first); started ahead and not yet running, stored and kept
        for its run; the next problem's, handed to it."""
        s = self.session
        if not self.running:
            s.store_row(job, ev)  # stored now: nothing completed is lost if the run ends here
            self.early.append((job, ev))
            self.in_flight -= 1
            if self.first_measured_at is None and ev.gpu:  # as evo.search.budget.ProblemClock starts a clock
                self.first_measured_at = time.monotonic()
            return
        if job.problem.key != self.problem.key and s._next is not None:
            s._next.take(job, ev)
            return
        self._record(job, ev, self.elapsed())
        self.in_flight -= 1

    def cancel_waiting(self) -> None:
        """Cancel the candidates waiting in the executor (all this problem's: none of the next has started), giving
        their emitters' proposals back to the scheduler."""
        for cand in self.session.executor.cancel_waiting():
            self.in_flight -= 1
            if cand.ticket in self.arms:
                self.scheduler.release(self.arms.pop(cand.ticket))
        self.cancelled = True

    def elapsed(self) -> float:
        return self.clock.elapsed()

    # -- inside the steps -----------------------------------------------------------------------------
    def _budget(self) -> int | None:
        """The evaluations this problem may reach with what is in flight: its floor while the floor holds a limit
        back."""
        budget = self.session.experiment.budget
        return budget.floor if self.held else budget.evaluations

    def _may_submit(self) -> bool:
        if not self.running:
            return bool(self.queue) and (self.room is None or self.in_flight + len(self.early) < self.room)
        budget = self._budget()
        return budget is None or self.archive.evaluations + self.in_flight < budget

    def _submit(self) -> None:
        s = self.session
        ticket = s.new_ticket()
        if self.queue:
            proposal, emitter = self.queue.popleft(), emitting.INITIAL
        else:
            arm = self.scheduler.choose(self.rng)
            proposal, emitter = s.emitters[arm].propose(self.ctx), s.emitters[arm].name
            self.arms[ticket] = arm
            self.exhausted |= proposal.genome.hash in self.seen  # no untried genome was found
        self.seen.add(proposal.genome.hash)
        s.executor.submit(Candidate(self.problem, proposal.genome, s.operator, proposal.origin, proposal.parents,
                                    ticket, emitter))
        self.in_flight += 1

    def _record(self, job: Candidate, ev: Evaluation, elapsed: float, stored: bool = False) -> None:
        """Store `ev` (unless it is already: an early row), then add it to the archive: the order from_store
        replays."""
        s = self.session
        if job.problem.key != self.problem.key:
            raise RuntimeError(f"job {job.ticket} of {job.problem.key} recorded for {self.problem.key}")
        if not stored:
            s.store_row(job, ev)
        (result,) = self.archive.add([ev])
        self.clock.note(ev, self.archive.evaluations, s.experiment.budget.floor)
        arm = self.arms.pop(job.ticket, None)
        if arm is not None and self.scheduler is not None:
            self.scheduler.credit(arm, result.status > AddStatus.NOT_ADDED)
        s._session_evaluations += 1
        self._emit("evaluation", elapsed, evaluation=ev, added=result.status)

    def _stop_reason(self, elapsed: float) -> str | None:
        """Why the search stops now, or None (evo.search.budget: the floor may hold wall time and stagnation back;
        it sets `held`)."""
        reason, self.held = stop_reason(self.session.experiment.budget, self.archive.evaluations,
                                        self.archive.best_index, elapsed, self._sol_share(), self.exhausted)
        return reason

    # -- opening and closing --------------------------------------------------------------------------
    def _open(self) -> None:
        """The archive rebuilt from the store (the early rows are replayed by `_begin`), the clock, the floor."""
        s, key = self.session, self.problem.key
        self.archive = GridArchive.for_problem(s.operator, self.problem, s.experiment.descriptors, s.margin)
        early_ids = {ev.id for _, ev in self.early}
        rows = [r for r in s.problem_rows(self.problem) if r.id not in early_ids]
        self.archive.add(rows)
        self.seen = {r.genome_hash for r in rows} | self.seen
        # wall_s counts from the first measured candidate: an early one, else one still to come
        self.clock = ProblemClock(float(s.store.meta(f"wall_s:{key}", 0.0)), self.first_measured_at)
        self.held = self.exhausted = False
        # the search process's own CPU time beside the clock (its share says whether the driver keeps up)
        self._cpu_spent, self._cpu_started = float(s.store.meta(f"cpu_s:{key}", 0.0)), time.process_time()
        if s.executor.occupancy is not None:
            s.executor.occupancy.restart()
        self.floor, self.scheduler = s.problem_floor(self.problem), None
        self.stop = self._stop_reason(self.clock.spent)

    def _begin(self) -> None:
        """Its emitters' scheduler and context, the events of its start, and the early rows into the archive."""
        s, exp = self.session, self.session.experiment
        self.rng = s._rng(self.index, 1, self.archive.evaluations)
        self.scheduler = emitting.get_scheduler(exp.scheduler, s.emitters)
        prefix, operator = f"{exp.name}#", self.problem.operator
        self.ctx = emitting.EmitContext(self.problem, self.archive, self.variation, self.seen, self.rng, seed=exp.seed,
                                        rows=lambda: [r for r in s.store.iter() if r.run_id.startswith(prefix)
                                                      and r.operator == operator])
        self.running = True
        self._emit("problem_start", self.elapsed())
        while s._notices:
            self._emit("message", self.elapsed(), message=s._notices.pop(0))
        if exp.budget.sol is not None and self.floor is None:
            self._emit("message", self.elapsed(), message=(
                f"budget.sol {exp.budget.sol} is not used for {self.problem.key}: no speed-of-light floor on "
                f"{s.executor.infos[0].gpu if s.executor.infos else 'this executor'} (a smoke run's fitness "
                f"is not a timing; a GPU run measures the copy bandwidth at start-up)"))
        for job, ev in self.early:  # stored as they came; into the archive now, in that order
            self._record(job, ev, self.elapsed(), stored=True)
        self._saved_at = time.monotonic()
        self.cancelled = False

    def _keep_what_came_back(self) -> None:
        """After Ctrl-C: keep what completed meanwhile (the next problem's rows stored only)."""
        s = self.session
        try:
            for job, ev in s.executor.poll(timeout_s=0):
                if job.problem.key == self.problem.key:
                    self._record(job, ev, self.elapsed())
                elif s._next is not None:
                    s.store_row(job, ev)
        except Exception:  # the executor may be half torn down by the same signal
            pass

    def close(self) -> tuple[GridArchive, ProblemSummary]:
        """Save its clock and (unless interrupted) its summary, report it done; its archive and summary."""
        self._save_clock()
        summary = self._summary(self.stop or "evaluations")
        if self.stop != "interrupted":
            self.session.store.set_meta(f"summary:{self.problem.key}", summary.as_dict())
        self._emit("problem_done", self.elapsed(), reason=summary.reason)
        return self.archive, summary

    def _save_clock(self) -> None:
        s, key = self.session, self.problem.key
        s.store.set_meta(f"wall_s:{key}", self.elapsed())
        s.store.set_meta(f"cpu_s:{key}", round(self._cpu_spent + time.process_time() - self._cpu_started, 3))
        if s.executor.occupancy is not None:  # this session's, for the problem
            s.store.set_meta(f"queue:{key}", s.executor.occupancy.summary())
        self._saved_at = time.monotonic()

    # -- reporting ------------------------------------------------------------------------------------
    def _sol_share(self) -> float | None:
        best = self.archive.best
        # the speed of light is a floor on GPU time, whatever clock the fitness is on (the call clock keeps inputs in
        # L2 between calls, so a memory-bound kernel's call time can even pass the floor)
        return self.floor.share(best.median_ms) if self.floor is not None and best is not None else None

    def _workers_changed(self) -> None:
        s = self.session
        if s.executor.busy != s._busy:
            s._busy = s.executor.busy
            self._emit("workers", self.elapsed())

    def _emit(self, kind: str, elapsed: float, **extra: object) -> None:
        s = self.session
        if s.on_event is None:
            return
        archive, best = self.archive, self.archive.best
        s.on_event(SearchEvent(
            kind=kind, problem_key=self.problem.key, problem_index=self.index, problems=len(s.experiment.problems),
            evaluations=archive.evaluations, budget=s.experiment.budget.evaluations,
            best=best.throughput if best else None, best_ratio=best.ratio if best else None, unit=s.unit,
            failures={k: n for k, n in sorted(archive.status_counts.items()) if k != "ok"},
            busy_workers=s.executor.busy, total_workers=s.executor.workers, coverage=archive.coverage,
            qd_score=archive.qd_score, elapsed_s=elapsed, sol_share=self._sol_share(),
            **extra))  # type: ignore[arg-type]

    def _summary(self, reason: str) -> ProblemSummary:
        arms = self.scheduler.arms if self.scheduler else []
        return ProblemSummary.of(self.problem.key, self.archive, reason, self.session.unit, self.session.margin,
                                 self.session.problem_rows(self.problem), self._sol_share(),
                                 {a.name: {"proposed": a.proposed, "improvements": a.improvements} for a in arms},
                                 exhausted=self.exhausted)
