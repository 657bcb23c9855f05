"""Whether a store can be resumed, decided before anything is written to it or any worker starts.

Opening a store for writing creates its tables, so a zero-byte file (a full disk, a `touch`) or another
program's SQLite database would silently become a fresh run, and a damaged row would be replayed into the archive
or stop the search halfway. A resume first reads the store read-only and refuses, in one line that says what to do,
a store that is empty, foreign, damaged or locked by another process; then `resume_changes` compares the run with
the experiment (`evo run` calls both before it imports the executor machinery, so a refusal takes well under 1 s).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

from evo.experiment.resume_check import experiment_changes
from evo.store.row_check import BadRow, Garbled, Skipped, decode_row, tolerant_text
from evo.store.sqlite import Store, damaged_message
from evo.store.store_lock import locked_message, try_write_lock
from evo.store.store_readonly import connect_readonly

__all__ = ["check_resumable", "resume_changes"]

_NEW_RUN = "start a new run with --out DIR"


def check_resumable(path: Path, error: type[Exception] = ValueError) -> None:
    """Raise `error` (one line) unless the store at `path` is an evo store whose every row decodes and whose
    write lock is free."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise error(f"cannot resume: {path} cannot be read ({e.strerror or e})") from None
    if size == 0:
        raise error(f"cannot resume: {path} is empty (0 bytes), nothing was stored; remove it, or {_NEW_RUN}")
    try:
        db = connect_readonly(path)
    except sqlite3.DatabaseError as e:
        raise error(f"cannot resume: {path} is not an evo store ({e}); {_NEW_RUN}") from None
    try:
        problem = _damage(db)
    except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
        raise error(f"cannot resume: {damaged_message(path, e)}; or {_NEW_RUN}") from None
    finally:
        db.close()
    if problem:
        raise error(f"cannot resume: {path} {problem}; `evo status`, `evo export` and `evo report` still read "
                    f"its intact rows; {_NEW_RUN}")
    _check_writable(path, error)
    try:
        free = try_write_lock(path)
    except sqlite3.Error as e:  # e.g. "attempt to write a readonly database"
        raise error(f"cannot resume: {path} cannot be written ({e}); {_WRITABLE}") from None
    if not free:
        raise error(f"cannot resume: {locked_message(path)}")


_WRITABLE = "a resume adds rows to it, so it and its folder must be writable (chmod u+w), or " + _NEW_RUN


def _check_writable(path: Path, error: type[Exception]) -> None:
    """A resume writes the store and, beside it, SQLite's -wal and -shm files: refuse a store or run directory the
    user cannot write before a worker starts, rather than fail on the first row."""
    for target in (path.parent, path):
        if not os.access(target, os.W_OK):
            raise error(f"cannot resume: {target} is not writable by this user; {_WRITABLE}")


def _damage(db: sqlite3.Connection) -> str:
    """What is wrong with the store ('' when nothing): SQLite's own check, then every row and metadata value."""
    db.text_factory = tolerant_text  # text that is not UTF-8 is a damaged row (row_check.Garbled), named below
    verdict = db.execute("PRAGMA quick_check").fetchone()[0]
    if verdict != "ok":
        raise sqlite3.DatabaseError(f"SQLite's check: {' '.join(str(verdict).split())[:200]}")
    skipped = Skipped()
    for row in db.execute("SELECT * FROM evaluations ORDER BY id"):
        try:
            decode_row(dict(row))
        except BadRow as e:
            skipped.add(row["id"], str(e))
    if skipped:
        return f"has {skipped.summary()}"
    for key, value in db.execute("SELECT key, value FROM meta"):
        try:
            if isinstance(key, Garbled) or isinstance(value, Garbled):
                raise ValueError("not UTF-8")
            json.loads(value)
        except (TypeError, ValueError):
            return f"has damaged run metadata (key {key!r} is not JSON)"
    return ""


def resume_changes(path: Path, experiment: Any, allow_changes: bool = False,
                   error: type[Exception] = ValueError) -> list[str]:
    """A resumed run must be the same search: its archive is rebuilt from rows this experiment would make. Reads
    the store at `path` (already passed by `check_resumable`) read-only; raises `error` (one line) when it is another
    experiment or operator, smoke against GPU, or changed in what decides results without `allow_changes`. Returns
    the differences that decide results (those allowed)."""
    with Store(path, readonly=True) as store:
        meta = store.all_meta()
    run = Path(path).parent
    for key, value in (("experiment", experiment.name), ("operator", experiment.operator)):
        if key in meta and meta[key] != value:
            raise error(f"cannot resume {run}: its {key} is {meta[key]!r}, the experiment's is {value!r}")
    smoke_before, smoke_now = meta.get("executor") == "smoke", experiment.executor.kind == "smoke"
    if "executor" in meta and smoke_before != smoke_now:
        kinds = ("a CPU smoke run", "a GPU run")
        raise error(f"cannot resume {run}: it is {kinds[not smoke_before]}, the experiment asks for "
                    f"{kinds[not smoke_now]} (smoke fitness is not a timing and must not mix with timings)")
    # the latest session's deciding settings; a run from before they were kept has its seed only
    before = meta.get("deciding") or ({"seed": meta["seed"]} if "seed" in meta else {})
    changes = experiment_changes(before, experiment)
    if changes and not allow_changes:
        raise error(f"cannot resume {run}: the experiment changed in what decides results: {'; '.join(changes)} "
                    f"(pass --allow-changes to resume anyway; the run records the change)")
    return changes
