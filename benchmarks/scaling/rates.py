"""What one run of a workload did per minute, and where its time went, from its stored rows and clocks.

The search's clock is the sum of its problems' `wall_s:<problem>` (each counts from the problem's first measured
candidate, so Ray's start and the first compiles are not in it). Rates are per minute of that clock: evaluations
stored, and correct ones. A GPU worker's busy share is the time its rows spent on it (`finished_at - started_at`:
loading, checking and timing the kernel) over that clock; `span_s` is the rows' own span (first measured start to
last finish), the clock a user sees when problems overlap at their hand-overs. The driver's CPU share is the
search process's CPU seconds (`cpu_s:<problem>`) over the clock: near 1 core, the GPUs wait for the driver.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["run_rates", "speedups", "merge_queues", "STAGES"]

STAGES = ("waiting", "compiling", "ready", "at_workers")  # evo.evaluate.occupancy's, as stored


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _on_worker(row: Any) -> bool:
    """Whether a GPU worker measured the row now: not a compile failure (no worker, no GPU) nor a measurement
    served again from the store or the shared database (worker "store#<id>" / "shared#<id>")."""
    return bool(row.gpu and row.worker) and not row.worker.startswith(("store#", "shared#"))


def merge_queues(summaries: Sequence[Any]) -> dict[str, dict[str, float]] | None:
    """Several problems' queue summaries (`queue:<problem>`: {"seconds", stage: {"mean", "max"}}) as one: each
    stage's mean weighted by the summaries' seconds, its largest count; None when none covers any time."""
    kept = [m for m in summaries if isinstance(m, dict) and isinstance(m.get("seconds"), (int, float))
            and m["seconds"] > 0]
    total = sum(m["seconds"] for m in kept)
    if not total:
        return None
    stages = [k for k, v in kept[0].items() if isinstance(v, dict)]
    return {k: {"mean": round(sum(m[k]["mean"] * m["seconds"] for m in kept if k in m) / total, 3),
                "max": max(m[k]["max"] for m in kept if k in m)} for k in stages}


def run_rates(rows: Sequence[Any], clocks: Mapping[str, float], cpu: Mapping[str, Any] | None = None,
              queues: Sequence[Any] = ()) -> dict[str, Any]:
    """Rates and shares of one run: `rows` every evaluation it stored, `clocks` each problem's wall_s, `cpu` each
    problem's cpu_s (None where not stored), `queues` the problems' queue summaries."""
    clock = float(sum(clocks.values()))
    minutes = clock / 60
    ok = sum(r.status == "ok" for r in rows)
    busy: dict[str, float] = {}
    measured = [r for r in rows if _on_worker(r)]
    for r in measured:
        busy[r.worker] = busy.get(r.worker, 0.0) + max(0.0, r.finished_at - r.started_at)
    span = (max(r.finished_at for r in measured) - min(r.started_at for r in measured)) if measured else 0.0
    phases = [r.resources.get("eval") for r in rows if isinstance(getattr(r, "resources", None), dict)]
    phases = [p for p in phases if isinstance(p, dict)]
    known = [float(c) for c in (cpu or {}).values() if isinstance(c, (int, float))]
    share = {w: round(b / clock, 3) for w, b in sorted(busy.items())} if clock > 0 else {}
    return {
        "evaluations": len(rows), "ok": ok, "search_s": round(clock, 2), "span_s": round(span, 2),
        "per_minute": round(len(rows) / minutes, 1) if clock > 0 else None,
        "ok_per_minute": round(ok / minutes, 1) if clock > 0 else None,
        "workers": sorted(busy),
        "worker_busy_share": share,
        "busy_share_mean": round(sum(share.values()) / len(share), 3) if share else None,
        "busy_share_min": min(share.values()) if share else None,
        "busy_share_of_span": ({w: round(b / span, 3) for w, b in sorted(busy.items())} if span > 0 else {}),
        "mean_s": {"compile": _mean([r.compile_s for r in rows if r.compile_s is not None]),
                   **{k: _mean([p[k] for p in phases if isinstance(p.get(k), (int, float))])
                      for k in ("load_s", "check_s", "time_s")}},
        "compile_queue": merge_queues(queues),
        # cores the search's own process used while searching; None unless every problem stored it
        "driver_cpu_share": (round(sum(known) / clock, 3) if clock > 0 and cpu is not None and known
                             and len(known) == len(clocks) else None),
    }


def speedups(per_minute: Mapping[int, float | None], reference: int) -> dict[str, float | None]:
    """Each run's rate over the reference run's (None where either is unknown or the reference is 0)."""
    base = per_minute.get(reference)
    return {str(n): (round(r / base, 3) if r is not None and base else None) for n, r in sorted(per_minute.items())}
