"""What happened to one evaluation offered to an archive."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["AddStatus", "AddResult"]


class AddStatus(IntEnum):
    """Ordered so that `status > NOT_ADDED` means the archive changed."""

    NOT_ADDED = 0  # failed, unplaceable, or not faster than the cell's elite by the noise margin
    IMPROVED = 1  # replaced the elite of an occupied cell
    NEW = 2  # filled an empty cell


@dataclass(frozen=True)
class AddResult:
    status: AddStatus
    cell: tuple[int, ...] | None = None  # None when the evaluation could not be placed
    throughput: float | None = None  # None for a failed evaluation
    reason: str = ""  # why it was not added, when it was not
