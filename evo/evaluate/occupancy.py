"""How full each stage of an executor's pipeline was over a stretch of time: the time-weighted mean and the
largest count of candidates waiting for a compile slot, compiling, compiled and waiting for a worker, and sent
to the workers (evaluating or queued behind the one evaluating).

It says where a search that leaves GPUs idle is held up: a compile queue that is long while no compiled
candidate waits means too few compile slots; both empty means the driver does not submit enough (the
search's window, or its own process being slow). The search saves it per problem in the store's metadata
(`queue:<problem>`), beside the problem's clock (`wall_s:<problem>`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["Occupancy", "STAGES", "merge_summaries"]

STAGES = ("waiting", "compiling", "ready", "at_workers")


class Occupancy:
    """Counts per stage, observed after every change, integrated over time since the last `restart`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.restart()

    def restart(self) -> None:
        """Forget what was observed; the counts now stay as they are until the next `observe`."""
        now = self._clock()
        self._start = self._last = now
        current = getattr(self, "_current", dict.fromkeys(STAGES, 0))
        self._current = dict(current)
        self._area = dict.fromkeys(STAGES, 0.0)
        self._max = dict(current)

    def observe(self, **counts: int) -> None:
        """The stages' counts from now on (a stage not named keeps its count)."""
        unknown = set(counts) - set(STAGES)
        if unknown:
            raise ValueError(f"unknown pipeline stage(s) {sorted(unknown)}; expected some of {', '.join(STAGES)}")
        self._advance()
        self._current.update(counts)
        for stage, n in counts.items():
            self._max[stage] = max(self._max[stage], n)

    def _advance(self) -> None:
        now = self._clock()
        dt = max(0.0, now - self._last)
        for stage, n in self._current.items():
            self._area[stage] += n * dt
        self._last = now

    def summary(self) -> dict[str, float | dict[str, float]]:
        """{"seconds": the stretch observed, <stage>: {"mean": time-weighted mean, "max": largest count}}."""
        self._advance()
        seconds = self._last - self._start
        out: dict[str, float | dict[str, float]] = {"seconds": round(seconds, 3)}
        for stage in STAGES:
            mean = self._area[stage] / seconds if seconds > 0 else float(self._current[stage])
            out[stage] = {"mean": round(mean, 3), "max": self._max[stage]}
        return out


def merge_summaries(summaries: list[Any]) -> dict[str, dict[str, float]] | None:
    """Several problems' `summary()`s (as the store keeps them, `queue:<problem>`) as one: each stage's mean
    weighted by each summary's seconds, its largest count; None when none covers any time (or none is a summary)."""
    summaries = [m for m in summaries if isinstance(m, dict) and m.get("seconds")]
    total = sum(m["seconds"] for m in summaries)
    if not total:
        return None
    stages = [k for k, v in summaries[0].items() if isinstance(v, dict)]
    return {k: {"mean": round(sum(m[k]["mean"] * m["seconds"] for m in summaries) / total, 2),
                "max": max(m[k]["max"] for m in summaries)} for k in stages}
