"""Parent selection: which elites of the archive the next child is varied from.

"uniform" draws elites uniformly (the classic MAP-Elites choice). "curiosity" favours cells that improved
recently: an elite's weight halves every `half_life` evaluations since it entered its cell, plus a floor
so that old cells are never forgotten. A cell that keeps improving is a region still worth searching.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from evo.archive import Elite, GridArchive

__all__ = ["Selection", "UniformSelection", "CuriositySelection", "get", "names"]


class Selection(ABC):
    name: ClassVar[str] = ""

    def select(self, archive: GridArchive, n: int, rng: np.random.Generator) -> list[Elite]:
        """`n` elites (distinct when the archive holds at least `n`). Raises ValueError on an empty archive."""
        if n < 1:
            raise ValueError(f"select at least one parent, got n={n}")
        elites = archive.elites()
        if not elites:
            raise ValueError("cannot select parents from an empty archive")
        p = self.weights(archive, elites)
        p = p / p.sum()
        idx = rng.choice(len(elites), size=n, replace=len(elites) < n, p=p)
        return [elites[int(i)] for i in idx]

    @abstractmethod
    def weights(self, archive: GridArchive, elites: list[Elite]) -> np.ndarray:
        """Non-negative, not all zero: one weight per elite, in the order given."""


class UniformSelection(Selection):
    name = "uniform"

    def weights(self, archive: GridArchive, elites: list[Elite]) -> np.ndarray:
        return np.ones(len(elites))


class CuriositySelection(Selection):
    name = "curiosity"

    def __init__(self, half_life: float = 32.0, floor: float = 0.1) -> None:
        if not half_life > 0:
            raise ValueError(f"curiosity: half_life must be positive, got {half_life!r}")
        if not 0 < floor <= 1:
            raise ValueError(f"curiosity: floor must be in (0, 1], got {floor!r}")
        self.half_life = float(half_life)
        self.floor = float(floor)

    def weights(self, archive: GridArchive, elites: list[Elite]) -> np.ndarray:
        age = np.array([archive.evaluations - e.index for e in elites], dtype=float)
        return self.floor + np.exp2(-age / self.half_life)


_REGISTRY: dict[str, type[Selection]] = {"uniform": UniformSelection, "curiosity": CuriositySelection}


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str, **settings: Any) -> Selection:
    if name not in _REGISTRY:
        raise ValueError(f"unknown selection {name!r}; known: {', '.join(names())}")
    return _REGISTRY[name](**settings)
