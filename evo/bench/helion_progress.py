"""How far Helion's autotuner got, read from its own per-configuration log while it runs.

Helion writes one CSV row per configuration it starts and finishes when HELION_AUTOTUNE_LOG names a path (columns
timestamp_s, config_index, generation, status, perf_ms, compile_time_s, config; flushed per row). A full-effort
tuning can outlast the command that runs it; `evo bench-search` polls this log during the tuning and puts the
summary into its report at every poll, so a run stopped mid-tuning still says how far Helion got and what its best
configuration measured by Helion's own timer (not evo's side-by-side clock: the report says which).
"""

from __future__ import annotations

import contextlib
import csv
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["LOG_VARIABLE", "autotune_progress", "watch"]

LOG_VARIABLE = "HELION_AUTOTUNE_LOG"  # Helion appends ".csv" (the rows) and ".log" (its messages) to this path


def autotune_progress(csv_path: str | Path) -> dict[str, Any] | None:
    """The summary of a Helion autotune CSV: configurations finished (ok and failed), generations, seconds since
    the tuning started, the best time (ms, Helion's timer), when it was first reached and its configuration;
    None while the file is missing or holds no finished row."""
    path = Path(csv_path)
    if not path.is_file():
        return None
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("status") and r["status"] != "started"]
    if not rows:
        return None
    ok = [r for r in rows if r["status"] == "ok" and r.get("perf_ms")]
    best = min(ok, key=lambda r: (float(r["perf_ms"]), float(r["timestamp_s"]))) if ok else None
    return {"configs": len(rows), "ok": len(ok), "failed": len(rows) - len(ok),
            "generations": 1 + max(int(r["generation"] or 0) for r in rows),
            "elapsed_s": round(max(float(r["timestamp_s"]) for r in rows), 1),
            "best_ms": float(best["perf_ms"]) if best else None,
            "best_at_s": round(float(best["timestamp_s"]), 1) if best else None,
            "best_config": best["config"] if best else None}


@contextlib.contextmanager
def watch(csv_path: Path, on_progress: Callable[[dict[str, Any]], Any], every_s: float = 15.0) -> Iterator[None]:
    """Call `on_progress(summary)` from a background thread every `every_s` seconds while the block runs, whenever
    the log has new rows, and once more at its end. A failing callback stops the polling, never the block."""
    stop = threading.Event()
    seen: list[Any] = [None]

    def poll() -> None:
        summary = autotune_progress(csv_path)
        if summary is not None and summary != seen[0]:
            seen[0] = summary
            on_progress(summary)

    def loop() -> None:
        with contextlib.suppress(Exception):
            while not stop.wait(every_s):
                poll()

    thread = threading.Thread(target=loop, name="helion-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with contextlib.suppress(Exception):
            poll()
