"""Quality-diversity metrics of an archive, and their history against the number of evaluations.

Names follow the MAP-Elites literature: *coverage* is the fraction of cells holding an elite, *QD-score*
the sum of the elites' throughputs, *best* the largest throughput. The archive ranks by throughput
(TFLOP/s or GB/s), always positive, so the QD-score needs no offset: it is reported raw, in the
operator's throughput unit, and as `norm_qd_score` = qd_score / number of cells (the mean throughput over
all cells with empty cells counting zero), which compares archives of different grid sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["ArchiveMetrics", "History"]


@dataclass(frozen=True)
class ArchiveMetrics:
    evaluations: int  # evaluations offered to the archive, failed ones included
    cells: int
    filled: int
    coverage: float
    qd_score: float
    norm_qd_score: float
    best: float | None  # throughput of the best elite
    best_elite: Any = None  # the Elite itself (evo.archive.grid.Elite), None while empty


@dataclass
class History:
    """One point per evaluation offered: after evaluation number `evaluations[i]`, the archive's best
    throughput was `best[i]` (None while empty), its QD-score `qd_score[i]` and coverage `coverage[i]`."""

    evaluations: list[int] = field(default_factory=list)
    best: list[float | None] = field(default_factory=list)
    qd_score: list[float] = field(default_factory=list)
    coverage: list[float] = field(default_factory=list)

    def append(self, evaluations: int, best: float | None, qd_score: float, coverage: float) -> None:
        self.evaluations.append(evaluations)
        self.best.append(best)
        self.qd_score.append(qd_score)
        self.coverage.append(coverage)

    def __len__(self) -> int:
        return len(self.evaluations)

    def as_dict(self) -> dict[str, list[Any]]:
        return {"evaluations": list(self.evaluations), "best": list(self.best),
                "qd_score": list(self.qd_score), "coverage": list(self.coverage)}

    def first_reaching(self, value: float, margin: float = 0.0) -> int | None:
        """The first evaluation count at which the best throughput came within `margin` (relative) of
        `value`; None if it never did."""
        threshold = value * (1.0 - margin)
        for n, b in zip(self.evaluations, self.best, strict=True):
            if b is not None and b >= threshold:
                return n
        return None
