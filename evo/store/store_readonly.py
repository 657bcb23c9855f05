"""Opening a store for reading only: `evo status`, `export` and `report` never write a run directory.

SQLite can read a WAL database without write access to it as long as its -shm index exists or can be made;
in a directory the user cannot write, where neither holds, the store is read as immutable (no writer can be
adding to it there). The schema is checked (its tables, and that their column names can be read), so that a file
that is SQLite but not a store, or a store whose schema a flipped byte damaged, says so in one line.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

__all__ = ["connect_readonly"]

_TABLES = {"evaluations", "meta"}


def connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection to the store at `path`; raises sqlite3.DatabaseError when it is none."""
    if not path.is_file():
        raise sqlite3.DatabaseError("no such file")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    try:
        db = _open(uri)
    except sqlite3.OperationalError:  # no -shm and no right to create one: nobody is writing here
        db = _open(uri + "&immutable=1")
    return db


def _open(uri: str) -> sqlite3.Connection:
    db = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=30)
    try:
        db.row_factory = sqlite3.Row
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError:
        db.close()
        raise
    if not _TABLES <= names:
        db.close()
        raise sqlite3.DatabaseError(f"no {' and '.join(sorted(_TABLES - names))} table: not an evo store")
    for table in sorted(_TABLES):
        try:
            db.execute(f"SELECT * FROM {table} LIMIT 0")  # its column names, decoded as every read will
        except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
            db.close()
            why = "a column name is not UTF-8" if isinstance(e, UnicodeDecodeError) else str(e)
            raise sqlite3.DatabaseError(f"its schema is damaged: table {table}: {why}") from None
    return db
