"""The compile pool's queue over time, read from a run's stores while it runs.

The search saves each problem's pipeline occupancy (evo.evaluate.occupancy: the time-weighted mean and largest
count of candidates waiting for a compile slot, compiling, compiled and waiting for a GPU, at the GPUs) as
`queue:<problem>` every few seconds (evo.search.problem_search.SAVE_CLOCK_S), each save covering the problem's
time so far. `QueueSampler` reads those saves (and the rows stored so far) from every store under a folder
while `evo` runs; `queue_intervals` turns consecutive saves of a problem into the mean of each stage over the
stretch between them, so a queue that fills up mid-run shows where it did.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.scaling.rates import STAGES

__all__ = ["queue_intervals", "QueueSampler"]

Snapshot = tuple[float, str, dict[str, Any]]  # (seconds since the run began, problem key, its saved summary)


def queue_intervals(snapshots: Sequence[Snapshot]) -> list[dict[str, Any]]:
    """Each stage's mean count over the stretch between consecutive saves of a problem (a problem's first save,
    or one whose covered time went back, as a resumed session's does: over the whole time it covers). Entries:
    {"t": when read, "problem", "seconds": the stretch, <stage>: mean}; saves that add no time are skipped."""
    out: list[dict[str, Any]] = []
    last: dict[str, dict[str, Any]] = {}
    for t, key, summary in sorted(snapshots, key=lambda s: s[0]):
        seconds = summary.get("seconds") if isinstance(summary, dict) else None
        if not isinstance(seconds, (int, float)) or seconds <= 0:
            continue
        before = last.get(key)
        last[key] = summary
        if before is not None and before["seconds"] == seconds:
            continue  # saved again with nothing new
        if before is None or seconds < before["seconds"]:
            span, means = seconds, {s: _mean(summary, s) for s in STAGES}
        else:
            span = seconds - before["seconds"]
            means = {s: max(0.0, (_mean(summary, s) * seconds - _mean(before, s) * before["seconds"]) / span)
                     for s in STAGES}
        out.append({"t": round(t, 2), "problem": key, "seconds": round(span, 3),
                    **{s: round(v, 3) for s, v in means.items()}})
    return out


def _mean(summary: dict[str, Any], stage: str) -> float:
    part = summary.get(stage)
    return float(part.get("mean", 0.0)) if isinstance(part, dict) else 0.0


class QueueSampler:
    """Reads every store under `folder` each `period_s` seconds in a thread of its own, keeping each
    `queue:<problem>` save that changed (`snapshots`) and the rows stored so far (`rows`: (t, count))."""

    def __init__(self, folder: Path, period_s: float = 2.0) -> None:
        self.folder, self.period_s = Path(folder), period_s
        self.snapshots: list[Snapshot] = []
        self.rows: list[tuple[float, int]] = []
        self._seen: dict[tuple[str, str], str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()

    def start(self) -> QueueSampler:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="queue-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.sample()  # the last saves, written as the run closed

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            self.sample()

    def sample(self) -> None:
        """One reading of every store (a store being created or locked is read next time)."""
        t = time.monotonic() - self._t0
        total = 0
        for store in sorted(self.folder.rglob("store.sqlite")):
            try:
                db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1)
                try:
                    saves = db.execute("SELECT key, value FROM meta WHERE key LIKE 'queue:%'").fetchall()
                    total += db.execute("SELECT count(*) FROM evaluations").fetchone()[0]
                finally:
                    db.close()
            except sqlite3.Error:
                continue
            for key, value in saves:
                if self._seen.get((str(store), key)) == value:
                    continue
                self._seen[(str(store), key)] = value
                try:
                    self.snapshots.append((t, key.split(":", 1)[1], json.loads(value)))
                except (TypeError, ValueError):
                    continue
        self.rows.append((round(t, 2), total))
