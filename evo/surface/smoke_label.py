"""How a smoke run's score is shown, the same way everywhere (progress, status, export, report): a number and
the words saying it is a stand-in, never a unit of speed."""

from __future__ import annotations

from typing import Any

__all__ = ["SMOKE_SCORE", "smoke_score", "smoke_value"]

SMOKE_SCORE = "stand-in score, NOT a timing"


def smoke_score(value: float) -> str:
    """55.0 -> "55 (stand-in score, NOT a timing)"."""
    return f"{value:.4g} ({SMOKE_SCORE})"


def smoke_value(operator: Any, problem: Any, evaluation: Any) -> float:
    """A smoke row's score as the archive ranks it, and so as progress, status and the report show it: the
    operator's throughput formula at the stand-in cost (higher is better), never the cost itself (issue 41: the
    export header showed 9.888e-06 where status said 53.02 for one elite)."""
    return float(operator.throughput(problem, evaluation.fitness_ms or evaluation.median_ms))
