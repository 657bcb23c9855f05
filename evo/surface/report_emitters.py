"""The report's view of the emitters (evo.search.emitters): for each emitter, its share of the proposals and the
archive improvements it caused, against evaluations, replayed from the store (each row names its emitter; the
archive is rebuilt row by row exactly as the search built it, so "improved" is what the scheduler credited)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evo.archive import AddStatus, GridArchive
from evo.experiment.spec import DescriptorSpec
from evo.problem import Problem
from evo.store.record import Evaluation

__all__ = ["emitter_history"]


def emitter_history(rows: Sequence[Evaluation], problem: Problem, operator: Any,
                    specs: Sequence[DescriptorSpec], noise: float, points: int = 200) -> dict[str, Any]:
    """{"evaluations": [...], "share": {emitter: [...]}, "credit": {emitter: [...]}} at up to `points`
    evaluation counts: share = the emitter's proposals so far over all proposals so far, credit = its archive
    improvements so far. Rows from before emitters existed are named "(none)"."""
    archive = GridArchive.for_problem(operator, problem, specs, noise)
    results = archive.add(list(rows)) if rows else []
    names = sorted({r.emitter or "(none)" for r in rows})
    proposed = dict.fromkeys(names, 0)
    credit = dict.fromkeys(names, 0)
    step = max(1, len(rows) // points)
    out: dict[str, Any] = {"evaluations": [], "share": {n: [] for n in names}, "credit": {n: [] for n in names}}
    for n, (row, result) in enumerate(zip(rows, results, strict=True), start=1):
        name = row.emitter or "(none)"
        proposed[name] += 1
        credit[name] += int(result.status > AddStatus.NOT_ADDED)
        if n % step == 0 or n == len(rows):
            out["evaluations"].append(n)
            for k in names:
                out["share"][k].append(round(proposed[k] / n, 4))
                out["credit"][k].append(credit[k])
    return out
