"""Time to quality: when a run's best correct kernel for a problem first came within `share` (99%) of the speed
of the reference run's final elite, on the problem's own clock.

Rows are the store's evaluations (evo.store.record.Evaluation, or anything with its `status`, `fitness_ms`, `gpu`,
`finished_at` and `id`). A row's fitness is its time on its run's objective clock (lower is faster), so "99% of
the elite's speed" is a best time at most the elite's time / 0.99. The clock of a problem starts where evo's own
does (evo.search.budget.ProblemClock): at its first row a GPU worker measured, here that row's `finished_at`
(failing any such row, its first row). The rows are taken in the order they finished, so that several GPUs
finishing out of order count as they happened.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SHARE", "Reach", "best_ms", "clock_origin", "reach", "quality_table", "quality_goal"]

SHARE = 0.99  # of the reference elite's speed


@dataclass(frozen=True)
class Reach:
    """When one run reached a target time for one problem: seconds on the problem's clock and the evaluations of
    the problem stored by then (None, None: never); `best_ms`, the run's own final best (None: no correct row)."""

    seconds: float | None
    evaluations: int | None
    best_ms: float | None

    @property
    def reached(self) -> bool:
        return self.seconds is not None


def _fitness(row: Any) -> float | None:
    ms = row.fitness_ms
    return float(ms) if row.status == "ok" and ms is not None and ms > 0 else None


def _in_order(rows: Sequence[Any]) -> list[Any]:
    return sorted(rows, key=lambda r: (r.finished_at, r.id if r.id is not None else 0))


def best_ms(rows: Sequence[Any]) -> float | None:
    """The fastest correct row's fitness time, None when no row is correct."""
    times = [t for t in map(_fitness, rows) if t is not None]
    return min(times) if times else None


def clock_origin(rows: Sequence[Any]) -> float | None:
    """The `finished_at` the problem's clock counts from: its first GPU-measured row, else its first row."""
    if not rows:
        return None
    measured = [r.finished_at for r in rows if r.gpu]
    return min(measured) if measured else min(r.finished_at for r in rows)


def reach(rows: Sequence[Any], target_ms: float | None) -> Reach:
    """When the running best of `rows` first came to `target_ms` or below."""
    mine = best_ms(rows)
    if target_ms is None or mine is None:
        return Reach(None, None, mine)
    origin = clock_origin(rows)
    best = None
    for n, row in enumerate(_in_order(rows), start=1):
        t = _fitness(row)
        if t is not None and (best is None or t < best):
            best = t
        if best is not None and best <= target_ms * (1 + 1e-12):
            return Reach(round(max(0.0, row.finished_at - origin), 3), n, mine)
    return Reach(None, None, mine)


def quality_table(runs: Mapping[int, Mapping[str, Sequence[Any]]], reference: int,
                  share: float = SHARE) -> dict[str, dict[str, Any]]:
    """Per problem of the reference run (then any only the others searched): the target (the reference's final
    elite time / `share`) and, per run (by GPU count), when it reached it and in what share of the reference's
    time. A problem the reference never measured correctly has no target; one a run did not search is so noted."""
    if not 0 < share <= 1:
        raise ValueError(f"share {share}: expected a fraction in (0, 1]")
    if reference not in runs:
        raise ValueError(f"reference run {reference} is not among the runs {sorted(runs)}")
    keys = list(runs[reference]) + [k for n in sorted(runs) for k in runs[n] if k not in runs[reference]]
    table: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(keys):
        ref_rows = runs[reference].get(key, ())
        elite = best_ms(ref_rows)
        target = elite / share if elite is not None else None
        entry: dict[str, Any] = {"reference_best_ms": elite, "target_ms": target}
        if not ref_rows:
            entry["note"] = f"not searched by the {reference}-GPU run: no target"
        elif target is None:
            entry["note"] = f"no correct evaluation in the {reference}-GPU run: no target"
        ref_reach = reach(ref_rows, target)
        per: dict[str, Any] = {}
        for n in sorted(runs):
            rows = runs[n].get(key)
            if rows is None:
                per[str(n)] = {"searched": False}
                continue
            got = reach(rows, target)
            item = {**asdict(got), "reached": got.reached, "rows": len(rows)}
            if got.reached and ref_reach.reached:
                item["of_reference_time"] = (round(got.seconds / ref_reach.seconds, 3) if ref_reach.seconds
                                             else None)  # the reference reached it at its first measured row
            per[str(n)] = item
        entry["runs"] = per
        table[key] = entry
    return table


def quality_goal(table: Mapping[str, Mapping[str, Any]], gpus: int, reference: int,
                 max_share: float) -> dict[str, Any]:
    """Whether on `gpus` GPUs every problem with a target reached it in at most `max_share` of the time the
    reference took (a run that reached it at its first measured row always meets it: it could not be sooner).
    `met` is None when no problem has a target or the run is missing."""
    met, missed, no_target = [], [], []
    for key, entry in table.items():
        if entry.get("target_ms") is None:
            no_target.append(key)
            continue
        run, ref = entry["runs"].get(str(gpus), {}), entry["runs"].get(str(reference), {})
        seconds, ref_s = run.get("seconds"), ref.get("seconds")
        ok = seconds is not None and ref_s is not None and (seconds == 0 or seconds <= max_share * ref_s)
        (met if ok else missed).append(key)
    judged = len(met) + len(missed)
    present = any(entry["runs"].get(str(gpus), {}).get("searched", True) for entry in table.values()
                  if str(gpus) in entry["runs"])
    return {"gpus": gpus, "max_share_of_reference_time": max_share,
            "met": (not missed) if judged and present else None,
            "problems_met": len(met), "problems": judged, "missed": missed, "no_target": no_target}
