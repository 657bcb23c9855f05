"""How a smoke run's score is shown, the same way everywhere (progress, status, export, report): a number and
the words saying it is a stand-in, never a unit of speed."""

from __future__ import annotations

__all__ = ["SMOKE_SCORE", "smoke_score"]

SMOKE_SCORE = "stand-in score, NOT a timing"


def smoke_score(value: float) -> str:
    """55.0 -> "55 (stand-in score, NOT a timing)"."""
    return f"{value:.4g} ({SMOKE_SCORE})"
