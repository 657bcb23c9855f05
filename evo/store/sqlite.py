"""The evaluation store: SQLite in WAL mode, one row per evaluation, written as each result arrives.

Every completed evaluation is committed on its own, so a crash or kill -9 loses nothing completed.
A measurement is identified by (source hash, problem, GPU, versions): `lookup` serves it again instead
of measuring twice. Run metadata (the experiment, seed, ...) lives in a small key/value table.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evo.problem import Problem
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
    directory the user cannot write, and can never change the store. Its rows are read and decoded once, on the
    first read, and every later read is served from that snapshot: a command that asks for each problem's rows
    several times (status, export and report of 10,000 shapes) decodes each row once, and sees one consistent
    store even while a run goes on writing it.
    """

    def __init__(self, path: str | Path, readonly: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.skipped = Skipped()  # damaged rows met while reading (evo.store.row_check): skipped, not fatal
        self._readonly = readonly
        self._by_problem: dict[str, list[Evaluation]] = {}  # a read-only store's decoded rows, by problem
        self._all: list[Evaluation] | None = None  # ... and all of them, once every row was read
        self._meta: dict[str, Any] | None = None  # and its metadata
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
        with self._lock, self._db:
            self._insert(ev)
            if source is not None:
                kernel_sources.put(self._db, ev.source_hash, source)
        return ev.id

    def add_many(self, evs: Iterable[Evaluation]) -> list[int]:
        """Append evaluations in one transaction, all or none (a bulk copy: a test fixture, an import); their ids."""
        with self._lock, self._db:
            return [self._insert(ev) for ev in evs]

    def _insert(self, ev: Evaluation) -> int:
        row = ev.to_row()
        row["versions_key"] = ev.versions_key
        names = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        cur = self._db.execute(f"INSERT INTO evaluations ({names}) VALUES ({marks})", list(row.values()))
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
        if self._readonly:
            rows = self._every_row() if problem_key is None else self._problem_rows(problem_key)
            yield from (ev for ev in rows if status is None or ev.status == status)
            return
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

    # -- a read-only store's rows, each decoded once (see the class doc) ------------------------------------
    def _problem_rows(self, problem_key: str) -> list[Evaluation]:
        if problem_key not in self._by_problem and self._all is None:
            self._by_problem[problem_key] = self._decode_rows(
                "SELECT * FROM evaluations WHERE problem_key=? ORDER BY id", (problem_key,))
        return self._by_problem.get(problem_key, [])

    def _every_row(self) -> list[Evaluation]:
        """Every intact row in id order; afterwards `_by_problem` holds every problem with one, in the order of
        its first."""
        if self._all is None:
            self._all = self._decode_rows("SELECT * FROM evaluations ORDER BY id")
            self._by_problem = {}
            for ev in self._all:
                self._by_problem.setdefault(ev.problem_key, []).append(ev)
        return self._all

    def _decode_rows(self, sql: str, args: Sequence[Any] = ()) -> list[Evaluation]:
        decoded = (self._decode(row) for row in self._rows(sql, args, dicts=True))
        return [ev for ev in decoded if ev is not None]

    def _rows(self, sql: str, args: Sequence[Any] = (), dicts: bool = False) -> list[Any]:
        """Every row `sql` selects: the one way this store reads. Text that is not UTF-8 (a flipped byte) is read
        as row_check.Garbled, so that its row is skipped as damaged (`_decode`) instead of ending the command; a
        store SQLite cannot read at all (a damaged page or schema) is refused as a whole, in one line. `dicts`: each
        row as a dict (faster to make than sqlite3.Row's, for reading thousands of whole rows)."""
        with self._lock:
            try:
                try:
                    return self._fetch(sql, args, dicts)
                except (sqlite3.OperationalError, UnicodeDecodeError) as e:
                    if self._db.text_factory is tolerant_text or not _undecodable(e):
                        raise
                    self._db.text_factory = tolerant_text  # from now on: this store holds damaged text
                    return self._fetch(sql, args, dicts)
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                raise StoreError(damaged_message(self.path, e)) from None

    def _fetch(self, sql: str, args: Sequence[Any], dicts: bool) -> list[Any]:
        cursor = self._db.cursor()
        if dicts:
            cursor.row_factory = None
        rows = cursor.execute(sql, args).fetchall()
        if not dicts:
            return rows
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _decode(self, row: Any) -> Evaluation | None:
        try:
            return decode_row(row if isinstance(row, dict) else dict(row))
        except BadRow as e:
            self.skipped.add(row["id"], str(e))
            return None

    def count(self, problem_key: str | None = None) -> int:
        if problem_key is None:
            return int(self._rows("SELECT COUNT(*) FROM evaluations")[0][0])
        return int(self._rows("SELECT COUNT(*) FROM evaluations WHERE problem_key=?", (problem_key,))[0][0])

    def problem_keys(self) -> list[str]:
        """Every problem with an intact row, in the order of their first row."""
        if self._readonly:  # (its readers go on to read every row)
            self._every_row()
            return list(self._by_problem)
        rows = self._rows("SELECT problem_key, MIN(id) AS first FROM evaluations GROUP BY problem_key ORDER BY first")
        return [r["problem_key"] for r in rows if self._has_intact_row(r["problem_key"])]

    def problems(self, status: str | None = None) -> list[Problem]:
        """The problems stored (those with a row of `status`, when given) in the order of their first row, read
        from the problem column alone: finding one among thousands decodes no row."""
        where, args = (" WHERE status=?", (status,)) if status is not None else ("", ())
        rows = self._rows(f"SELECT problem_key, problem, MIN(id) AS first FROM evaluations{where} "
                          "GROUP BY problem_key ORDER BY first", args)
        found = []
        for row in rows:
            try:
                problem = Problem.from_json(row["problem"])
            except (ValueError, TypeError, KeyError, AttributeError):  # a damaged row: its readers skip it
                continue
            if problem.key == row["problem_key"]:
                found.append(problem)
        return found

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
        if self._readonly:  # (per-problem keys, read for each of thousands of problems: one query in all)
            return self._meta_snapshot().get(key, default)
        rows = self._rows("SELECT value FROM meta WHERE key=?", (key,))
        return _meta_value(rows[0]["value"], default) if rows else default

    def all_meta(self) -> dict[str, Any]:
        if self._readonly:
            return dict(self._meta_snapshot())
        return self._read_meta()

    def _meta_snapshot(self) -> dict[str, Any]:
        if self._meta is None:
            self._meta = self._read_meta()
        return self._meta

    def _read_meta(self) -> dict[str, Any]:
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
