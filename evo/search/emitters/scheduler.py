"""Schedulers: which emitter proposes the next child, shifted toward the emitters whose children improve the archive.

`BanditScheduler` (in the spirit of pyribs' bandit scheduler) treats the emitters as arms of a discounted UCB1
bandit. An emitter's credit is the number of its evaluations that entered the archive (a new cell, or a faster
kernel in an occupied one); older outcomes count less (each new outcome multiplies every past one by
`discount`), because what works changes as the archive fills. The search is asynchronous, so a proposal still in
flight counts as a pull with no credit yet: a burst of proposals does not all go to one arm before any returns.
Every arm keeps at least `floor` of the proposals. `choose` and `credit` are pure bookkeeping, so the scheduler
is tested without a search.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evo.search.emitters.base import Emitter

__all__ = ["BanditScheduler", "ArmStats", "get", "names"]


@dataclass
class ArmStats:
    name: str
    pulls: float = 0.0  # discounted completed proposals
    credit: float = 0.0  # discounted archive improvements
    pending: int = 0  # proposals in flight
    proposed: int = 0  # all proposals, undiscounted
    improvements: int = 0  # all archive improvements, undiscounted
    history: list[tuple[int, int]] = field(default_factory=list)  # (proposed, improvements) after each outcome


class BanditScheduler:
    name = "bandit"

    def __init__(self, emitters: Sequence[Emitter], explore: float = 1.0, discount: float = 0.98,
                 floor: float = 0.05) -> None:
        if not emitters:
            raise ValueError("bandit: at least one emitter is needed")
        if not explore >= 0:
            raise ValueError(f"bandit: explore must be >= 0, got {explore!r}")
        if not 0 < discount <= 1:
            raise ValueError(f"bandit: discount must be in (0, 1], got {discount!r}")
        if not 0 <= floor * len(emitters) < 1:
            raise ValueError(f"bandit: floor times the number of emitters must be in [0, 1), got {floor!r}")
        self.emitters = list(emitters)
        self.explore, self.discount, self.floor = float(explore), float(discount), float(floor)
        self.arms = [ArmStats(e.name) for e in self.emitters]

    def choose(self, rng: np.random.Generator) -> int:
        """The index of the emitter to propose next (call `credit` with it when the result is back)."""
        if self.floor and rng.random() < self.floor * len(self.arms):
            i = int(rng.integers(len(self.arms)))
        else:
            i = int(np.argmax(self.ucb() + rng.random(len(self.arms)) * 1e-9))  # random tie-break
        self.arms[i].pending += 1
        self.arms[i].proposed += 1
        return i

    def ucb(self) -> np.ndarray:
        """Each arm's upper confidence bound on its credit per proposal; an arm never tried comes first."""
        n = np.array([a.pulls + a.pending for a in self.arms])
        if (n == 0).any():
            return np.where(n == 0, np.inf, 0.0)
        mean = np.array([a.credit for a in self.arms]) / n
        return mean + self.explore * np.sqrt(2.0 * math.log(n.sum()) / n)

    def credit(self, index: int, improved: bool) -> None:
        """The outcome of a proposal of emitter `index`: whether it improved the archive."""
        for a in self.arms:
            a.pulls *= self.discount
            a.credit *= self.discount
        arm = self.arms[index]
        arm.pending = max(0, arm.pending - 1)
        arm.pulls += 1.0
        arm.credit += float(improved)
        arm.improvements += int(improved)
        arm.history.append((arm.proposed, arm.improvements))

    def shares(self) -> dict[str, float]:
        total = sum(a.proposed for a in self.arms) or 1
        return {a.name: a.proposed / total for a in self.arms}

    def release(self, index: int) -> None:
        """A proposal that never came back (cancelled at the end of a problem)."""
        self.arms[index].pending = max(0, self.arms[index].pending - 1)


_REGISTRY: dict[str, type[BanditScheduler]] = {"bandit": BanditScheduler}


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str, emitters: Sequence[Emitter], **settings: Any) -> BanditScheduler:
    if name not in _REGISTRY:
        raise ValueError(f"unknown scheduler {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name](emitters, **settings)
