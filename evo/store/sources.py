"""The kernel sources a store keeps: the exact text of each distinct kernel it measured, keyed by its hash.

A row names its kernel by `source_hash` only; the text itself is written once per distinct kernel, in the same
transaction as the first row naming it, into the `sources` table. `evo export`, `evo bench`, the zoo and the API
then serve what was measured rather than the genome rendered again (a renderer that changed since would give other
text). A store made before the table existed gains it when opened for writing; read-only, its absence reads as
"no source kept", and the readers render the genome again and say so.
"""

from __future__ import annotations

import hashlib
import sqlite3

__all__ = ["source_hash", "create_table", "put", "get", "kept"]

_TABLE = "sources"


def source_hash(source: str) -> str:
    """A kernel's identity: the first 20 hex digits of the SHA-256 of its rendered module."""
    return hashlib.sha256(source.encode()).hexdigest()[:20]


def create_table(db: sqlite3.Connection) -> None:
    db.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (source_hash TEXT PRIMARY KEY, source TEXT NOT NULL)")


def kept(db: sqlite3.Connection) -> bool:
    """Whether the store has the table (an older store opened read-only has not)."""
    try:
        return db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (_TABLE,)).fetchone() is not None
    except sqlite3.DatabaseError:  # a damaged schema: nothing is served from it
        return False


def put(db: sqlite3.Connection, key: str, source: str) -> None:
    """Keep `source` under `key` unless it is kept already; ValueError when `key` is not its hash."""
    if not isinstance(source, str) or source_hash(source) != key:
        raise ValueError(f"the source given for kernel {key!r} does not hash to it")
    db.execute(f"INSERT OR IGNORE INTO {_TABLE} (source_hash, source) VALUES (?, ?)", (key, source))


def get(db: sqlite3.Connection, key: str) -> str | None:
    """The kept text of kernel `key`; None when the store keeps none for it (no table, no row, or text that no
    longer hashes to `key`: a damaged store's row is not served as the measured source)."""
    if not key:
        return None
    try:
        row = db.execute(f"SELECT source FROM {_TABLE} WHERE source_hash=?", (key,)).fetchone()
    except sqlite3.DatabaseError:  # no such table (a store from before sources were kept), or a damaged one
        return None
    text = row[0] if row is not None else None
    return text if isinstance(text, str) and source_hash(text) == key else None
