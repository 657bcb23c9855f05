"""A session's folder, and one run's record in it read from the stores under the run's folder (`evo run` leaves one
store, `evo zoo --run` one per operator): rows by problem, and each problem's clock (`wall_s:`), the search
process's CPU seconds (`cpu_s:`), queue summary (`queue:`) and end summary (`summary:`, stored only when the
problem's search ended).

`slim_copy` keeps a store's rows and metadata without its kernel texts (the `sources` table): all that the
scaling figures are computed from, at a size that travels back from the GPU machine.

    FOLDER/session.json                    what was planned, on what GPU, and what was skipped
    FOLDER/<workload>/<n>gpu/measure.json  what the run measured beside its stores (benchmarks.scaling.runner)
    FOLDER/<workload>/<n>gpu/.../store.sqlite
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RunRecord", "read_run", "slim_copy", "run_folder", "STORE_NAME", "MEASURE", "SESSION"]

STORE_NAME = "store.sqlite"
MEASURE = "measure.json"
SESSION = "session.json"


def run_folder(root: Path, workload: str, gpus: int) -> Path:
    """The folder of `workload`'s run on `gpus` GPUs in the session folder `root`."""
    return root / workload / f"{gpus}gpu"


@dataclass
class RunRecord:
    """What the stores under one run's folder hold, merged (problem keys name their operator, so they are
    distinct across an evo zoo run's stores)."""

    rows: dict[str, list[Any]] = field(default_factory=dict)  # problem -> its evaluations, in the order stored
    clocks: dict[str, float] = field(default_factory=dict)  # problem -> wall_s
    cpu: dict[str, Any] = field(default_factory=dict)  # problem -> cpu_s (None: not stored)
    queues: dict[str, Any] = field(default_factory=dict)  # problem -> its queue summary
    ended: set[str] = field(default_factory=set)  # problems whose search ended (a summary was stored)
    stores: list[str] = field(default_factory=list)
    skipped_rows: int = 0  # damaged rows the store skipped while reading

    @property
    def all_rows(self) -> list[Any]:
        return [r for rows in self.rows.values() for r in rows]


def read_run(folder: Path) -> RunRecord:
    """The record of every store under `folder` (an empty record when there is none)."""
    from evo.store import Store

    record = RunRecord()
    for path in sorted(Path(folder).rglob(STORE_NAME)):
        with Store(path, readonly=True) as store:
            rows = store.evaluations()
            meta = store.all_meta()
            record.skipped_rows += len(store.skipped)
        record.stores.append(str(path))
        planned = [k for k in meta.get("problems") or [] if isinstance(k, str)]
        for key in dict.fromkeys(planned + [r.problem_key for r in rows]):
            record.rows.setdefault(key, [])
            record.clocks[key] = float(meta.get(f"wall_s:{key}") or 0.0)
            record.cpu[key] = meta.get(f"cpu_s:{key}")
            record.queues[key] = meta.get(f"queue:{key}")
            if meta.get(f"summary:{key}") is not None:
                record.ended.add(key)
        for r in rows:
            record.rows[r.problem_key].append(r)
    return record


def slim_copy(source: Path, target: Path) -> Path:
    """A copy of the store at `source` without its kernel texts, as one file at `target` (no WAL beside it)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.unlink()
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(str(target))
    try:
        src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")
        if dst.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='sources'").fetchone():
            dst.execute("DELETE FROM sources")
        dst.commit()
        dst.execute("VACUUM")
    finally:
        src.close()
        dst.close()
    return target
