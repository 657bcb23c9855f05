"""A problem's budget as the search applies it: the clock that `wall_s` reads, the floor in evaluations, and what
a status or report says of a problem that ended before its floor.

Small problems are the ones a wall-time budget starves: a decode GEMV whose search spends its seconds waiting for
the workers to start gets a handful of evaluations, or none. So a problem's clock starts at its first measured
candidate (a row a worker's device stamped: timed, wrong, crashed, ... but not one refused before it reached a
GPU), and `budget.min_evaluations` (evo.experiment.spec.Budget.floor) keeps wall time and stagnation from ending
it earlier, unless its space is exhausted: the emitters could only propose genomes already tried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["ProblemClock", "stop_reason", "cut_short"]

FLOOR_HELD = ("wall_s", "stagnation")  # the limits the floor holds back (the evaluations limit and sol do not)


class ProblemClock:
    """Seconds spent on one problem: `spent` in earlier sessions, plus this session's time since its first measured
    candidate (`started`, a time.monotonic() reading, or None: not yet)."""

    def __init__(self, spent: float = 0.0, started: float | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.spent, self.started, self._now = float(spent), started, now

    def elapsed(self) -> float:
        return self.spent + (self._now() - self.started if self.started is not None else 0.0)

    def note(self, evaluation: Any, evaluations: int, floor: int) -> None:
        """Start the clock at the first row a worker measured; failing any such row, once `floor` rows have come
        back (a problem whose every candidate fails before a GPU must still end on its wall time)."""
        if self.started is None and (bool(getattr(evaluation, "gpu", "")) or evaluations >= max(1, floor)):
            self.started = self._now()


def stop_reason(budget: Any, evaluations: int, best_index: int, elapsed: float, sol_share: float | None,
                exhausted: bool) -> tuple[str | None, bool]:
    """(why the problem's search stops now or None, whether the floor is holding a limit back). `budget` is an
    evo.experiment.spec.Budget; `best_index` the evaluations after which the best last rose."""
    if budget.evaluations is not None and evaluations >= budget.evaluations:
        return "evaluations", False
    reason = None
    if budget.wall_s is not None and elapsed >= budget.wall_s:
        reason = "wall_s"
    elif budget.stagnation is not None and evaluations - best_index >= budget.stagnation:
        reason = "stagnation"
    sol = budget.sol is not None and sol_share is not None and sol_share >= budget.sol
    if reason is not None and evaluations < budget.floor and not exhausted:
        return ("sol", False) if sol else (None, True)
    return reason or ("sol" if sol else None), False


def cut_short(summary: dict[str, Any] | None, evaluations: int, floor: int) -> str:
    """A few words when a problem's search ended before its floor ("" otherwise): unfinished (no summary: Ctrl-C,
    lost workers, or a search still running), or a limit the floor did not hold back then (a run made before the
    floor existed). A problem whose space was exhausted, or that reached `sol`, was not cut short."""
    if evaluations >= floor:
        return ""
    if summary is None:
        return f"cut short: {evaluations} of its {floor}-evaluation floor (interrupted, or still running)"
    reason = str(summary.get("reason", ""))
    if summary.get("exhausted") or reason in ("sol", "evaluations"):
        return ""
    return f"cut short: {evaluations} of its {floor}-evaluation floor (stopped by {reason or 'an unknown limit'})"
