"""The hand-over from one problem to the next: the next problem's first population starts while the problem
before it drains.

A problem that will submit nothing more (its budget is reached, or every evaluation it may still make is in
flight) keeps its last candidates in flight for a compile and a measurement. Searched strictly one after the
other, the next problem's first candidates would only then be rendered and compiled, and every GPU would wait
for them, the more often the faster the problems go (evo.bench.driver_load, two simulated GPUs, the ten LLM GEMMs
at 150 evaluations each: busy 96% before, 98.6% with this and the threaded surrogate refit, on a quiet 2-core box;
reports/gpu/driver-load-multiproblem-simulated.json). So the search takes the next
problem's first population (elites transferred from the archives as they are at that moment, the family's
seeds, random genomes) into the free slots of the window as soon as the current problem stops submitting. Their
results are stored as they arrive (a crash or a kill loses none of them) and kept here, to enter the next
problem's archive, in the order they came, once its search begins. Only the first population starts early: the
emitters, which learn from the problem's own archive, wait for it.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

# the types are the search's (evo.evaluate.Candidate, evo.problem.Problem, evo.search.variation's Proposal and
# Variation, evo.store.record.Evaluation), named in comments only: this module adds no floor under the loop

__all__ = ["NextProblem"]


@dataclass
class NextProblem:
    """A problem whose first population started before its search did."""

    index: int
    problem: Any  # Problem
    variation: Any  # Variation
    queue: deque[Any]  # the first population's Proposals not submitted yet
    seen: set[str]  # genomes already tried or submitted for this problem
    early: list[tuple[Any, Any]] = field(default_factory=list)  # (Candidate, stored Evaluation)s in before its search
    in_flight: int = 0  # submitted, not yet come back
    room: int | None = None  # how many it may submit before its search begins: its budget less its stored rows
    first_measured_at: float | None = None  # time.monotonic() of its first row a worker measured: its clock's start

    def may_submit(self) -> bool:
        return bool(self.queue) and (self.room is None or self.in_flight + len(self.early) < self.room)

    def arrived(self, job: Any, ev: Any) -> None:
        self.early.append((job, ev))
        self.in_flight -= 1
        if self.first_measured_at is None and ev.gpu:  # as evo.search.budget.ProblemClock starts a clock
            self.first_measured_at = time.monotonic()
