"""The evaluation store: SQLite in WAL mode, one row per evaluation, written as each result arrives.

Every completed evaluation is committed on its own, so a crash or kill -9 loses nothing completed.
A measurement is identified by (source hash, problem, GPU, versions): `lookup` serves it again instead
of measuring twice. Run metadata (the experiment, seed, ...) lives in a small key/value table.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from evo.store import sources as kernel_sources
from evo.store.record import MEASURED, Evaluation
from evo.store.row_check import BadRow, Garbled, Skipped, decode_row, tolerant_text
from evo.store.store_lock import LOCK_WAIT_S, locked_message

__all__ = ["Store", "StoreError"]

_COLUMNS = {
    "operator": "TEXT", "problem_key": "TEXT", "problem": "TEXT", "genome": "TEXT", "genome_hash": "TEXT",
    "source_hash": "TEXT", "status": "TEXT", "reason": "TEXT", "gpu": "TEXT", "versions": "TEXT",
    "versions_key": "TEXT", "median_ms": "REAL", "spread_ms": "REAL", "times_ms": "TEXT", "baseline": "TEXT",
    "baseline_ms": "REAL", "baseline_spread_ms": "REAL", "call_ms": "REAL", "baseline_call_ms": "REAL",
    "host_us": "REAL", "baseline_host_us": "REAL", "objective": "TEXT", "max_rel_error": "REAL", "resources": "TEXT",
    "compile_s": "REAL", "origin": "TEXT", "parents": "TEXT", "emitter": "TEXT", "run_id": "TEXT", "worker": "TEXT",
    "started_at": "REAL", "finished_at": "REAL",
}


_WRITE_WAIT_MS = 30_000


class StoreError(ValueError):
    """A store that cannot be opened or read as one (not SQLite, damaged, not an evo store); one-line message."""


def damaged_message(path: Path, error: BaseException) -> str:
    """The one-line refusal of a store SQLite cannot read (a damaged page, a damaged schema)."""
    why = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
    return (f"{path} is damaged ({why}); recover what SQLite can still read with "
            f"`sqlite3 {path} .recover | sqlite3 recovered.sqlite`, then put recovered.sqlite in its place")


# What the old rows of a store hold in a column added later: a clock they never measured is NULL (None), not ''
# (which would read back as a string); their objective was GPU time, the only one there was.
_ADDED_DEFAULTS = {"REAL": "NULL", "objective": "'gpu'"}


def _migrate(db: sqlite3.Connection) -> None:
    """Add the columns a store made by an older evo lacks (e.g. `emitter`, the call and host clocks); their old
    rows read as '' (text), None (numbers) or "gpu" (objective)."""
    have = {r[1] for r in db.execute("PRAGMA table_info(evaluations)")}
    for name, kind in _COLUMNS.items():
        if name not in have:
            default = _ADDED_DEFAULTS.get(name, _ADDED_DEFAULTS.get(kind, "''"))
            db.execute(f"ALTER TABLE evaluations ADD COLUMN {name} {kind} DEFAULT {default}")


class Store:
    """A thread-safe handle on one SQLite evaluation store. Readers in other processes may open it too.

    `readonly` opens an existing store for inspection only (status, export, report): it works on a run
    directory the user cannot write, and can never change the store.
    """

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.skipped = Skipped()  # damaged rows met while reading (evo.store.row_check): skipped, not fatal
        try:
            if readonly:
                from evo.store.store_readonly import connect_readonly

                self._db = connect_readonly(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # a bounded wait while opening (another program holding the store is named, not waited on for
                # 30 s); once open, a run's writes wait out a reader's checkpoint rather than lose a row
                self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=LOCK_WAIT_S)
                self._create()
                self._db.execute(f"PRAGMA busy_timeout={_WRITE_WAIT_MS}")
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            if "locked" in str(e) and not readonly:
                raise StoreError(locked_message(self.path)) from None
            raise StoreError(f"{self.path}: cannot be opened as an evo store ({e})") from None

    def _create(self) -> None:
        self._db.row_factory = sqlite3.Row
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            cols = ", ".join(f"{k} {t}" for k, t in _COLUMNS.items())
            self._db.execute(f"CREATE TABLE IF NOT EXISTS evaluations (id INTEGER PRIMARY KEY AUTOINCREMENT, {cols})")
            _migrate(self._db)
            self._db.execute("CREATE INDEX IF NOT EXISTS by_measurement ON evaluations "
                             "(source_hash, problem_key, gpu, versions_key)")
            self._db.execute("CREATE INDEX IF NOT EXISTS by_problem ON evaluations (problem_key, id)")
            self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
            kernel_sources.create_table(self._db)  # (an older store gains it here)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- evaluations ----------------------------------------------------------------------------------
    def add(self, ev: Evaluation, source: str | None = None) -> int:
        """Append one evaluation and commit it; returns its row id (also set on `ev.id`). `source`, the kernel's text
        (it must hash to `ev.source_hash`), is kept with the row unless its kernel's is already (evo.store.sources)."""
        if source is not None and kernel_sources.source_hash(source) != ev.source_hash:
            raise ValueError(f"the source given with evaluation of {ev.problem_key} {ev.genome_hash} does not hash to "
                             f"its source_hash {ev.source_hash!r}")
        row = ev.to_row()
        row["versions_key"] = ev.versions_key
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        with self._lock, self._db:
            cur = self._db.execute(f"INSERT INTO evaluations ({names}) VALUES ({marks})", list(row.values()))
            if source is not None:
                kernel_sources.put(self._db, ev.source_hash, source)
        ev.id = int(cur.lastrowid)
        return ev.id

    def source(self, source_hash: str) -> str | None:
        """The kept text of the kernel `source_hash`, exactly as it was measured; None when this store keeps none for
        it (a store made before sources were kept, a row without a kernel, a damaged text)."""
        with self._lock:
            return kernel_sources.get(self._db, source_hash)

    @property
    def keeps_sources(self) -> bool:
        """Whether this store has the table of kernel sources (one made by an older evo, read only, has not)."""
        with self._lock:
            return kernel_sources.kept(self._db)

    def lookup(self, source_hash: str, problem_key: str, gpu: str, versions: dict[str, str]) -> Evaluation | None:
        """The latest measured evaluation of this exact kernel source, problem, GPU and versions."""
        marks = ", ".join("?" for _ in MEASURED)
        rows = self._rows(
            "SELECT * FROM evaluations WHERE source_hash=? AND problem_key=? AND gpu=? AND versions_key=? "
            f"AND status IN ({marks}) ORDER BY id DESC LIMIT 1",
            (source_hash, problem_key, gpu, json.dumps(versions, sort_keys=True), *MEASURED))
        return self._decode(rows[0]) if rows else None  # a damaged row is measured again, not served

    def evaluations(self, problem_key: str | None = None, status: str | None = None) -> list[Evaluation]:
        """Evaluations in the order they were stored, optionally for one problem and/or status."""
        return list(self.iter(problem_key, status))

    def iter(self, problem_key: str | None = None, status: str | None = None) -> Iterator[Evaluation]:
        where, args = [], []
        if problem_key is not None:
            where.append("problem_key=?")
            args.append(problem_key)
        if status is not None:
            where.append("status=?")
            args.append(status)
        sql = "SELECT * FROM evaluations" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id"
        for row in self._rows(sql, args):
            ev = self._decode(row)
            if ev is not None:
                yield ev

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        """Every row `sql` selects: the one way this store reads. Text that is not UTF-8 (a flipped byte) is read
        as row_check.Garbled, so that its row is skipped as damaged (`_decode`) instead of ending the command; a
        store SQLite cannot read at all (a damaged page or schema) is refused as a whole, in one line."""
        with self._lock:
            try:
                try:
                    return self._db.execute(sql, args).fetchall()
                except (sqlite3.OperationalError, UnicodeDecodeError) as e:
                    if self._db.text_factory is tolerant_text or not _undecodable(e):
                        raise
                    self._db.text_factory = tolerant_text  # from now on: this store holds damaged text
                    return self._db.execute(sql, args).fetchall()
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                raise StoreError(damaged_message(self.path, e)) from None

    def _decode(self, row: sqlite3.Row) -> Evaluation | None:
        try:
            return decode_row(dict(row))
        except BadRow as e:
            self.skipped.add(row["id"], str(e))
            return None

    def count(self, problem_key: str | None = None) -> int:
        if problem_key is None:
            return int(self._rows("SELECT COUNT(*) FROM evaluations")[0][0])
        return int(self._rows("SELECT COUNT(*) FROM evaluations WHERE problem_key=?", (problem_key,))[0][0])

    def problem_keys(self) -> list[str]:
        rows = self._rows("SELECT problem_key, MIN(id) AS first FROM evaluations GROUP BY problem_key ORDER BY first")
        return [r["problem_key"] for r in rows if self._has_intact_row(r["problem_key"])]

    def _has_intact_row(self, problem_key: Any) -> bool:
        """Whether any row of the problem decodes: a problem whose every row is damaged is not listed, so readers
        never meet a problem without rows."""
        if not isinstance(problem_key, str) or isinstance(problem_key, Garbled):
            return False
        rows = self._rows("SELECT * FROM evaluations WHERE problem_key=? ORDER BY id", (problem_key,))
        return any(self._decode(row) is not None for row in rows)

    def frame(self):  # -> pandas.DataFrame
        """All evaluations as a pandas DataFrame (one row per evaluation, JSON columns left as text)."""
        import pandas as pd

        with self._lock:
            return pd.read_sql_query("SELECT * FROM evaluations ORDER BY id", self._db)

    # -- run metadata ---------------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def meta(self, key: str, default: Any = None) -> Any:
        rows = self._rows("SELECT value FROM meta WHERE key=?", (key,))
        return _meta_value(rows[0]["value"], default) if rows else default

    def all_meta(self) -> dict[str, Any]:
        rows = self._rows("SELECT key, value FROM meta ORDER BY key")
        missing = object()
        values = {r["key"]: _meta_value(r["value"], missing) for r in rows}
        return {k: v for k, v in values.items() if v is not missing and isinstance(k, str) and not
                isinstance(k, Garbled)}


def _undecodable(error: BaseException) -> bool:
    """Whether reading failed on text that is not UTF-8 (Python's sqlite3 decodes every text value it reads)."""
    return isinstance(error, UnicodeDecodeError) or "decode" in str(error)


def _meta_value(text: Any, default: Any) -> Any:
    """A metadata value, or `default` where the stored text is not JSON or not UTF-8 (an edited or damaged store):
    readers then behave as for a key never written, and a resume refuses the store (evo.store.resumable)."""
    if isinstance(text, Garbled):
        return default
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return default
