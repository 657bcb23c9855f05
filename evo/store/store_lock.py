"""Who holds a store's write lock, asked within a bounded wait instead of SQLite's 30 s busy timeout.

A run takes the run directory's lock (evo.experiment.runlock), so another evo run is refused before it gets here;
what can still hold the store is another program: a `sqlite3` shell in a transaction, a notebook, a sync tool.
Waiting 30 s per statement for it and then ending in `database is locked` tells the user nothing, so a resume
tries the write lock once, for a few seconds, and names the processes that have the store open (Linux /proc).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

__all__ = ["LOCK_WAIT_S", "holders", "locked_message", "try_write_lock"]

LOCK_WAIT_S = 3.0  # long enough for a reader's checkpoint or a short transaction, short enough to wait for


def try_write_lock(path: Path, wait_s: float = LOCK_WAIT_S) -> bool:
    """True when the store's write lock can be taken (and is released again) within `wait_s` seconds."""
    db = sqlite3.connect(str(path), timeout=wait_s, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "busy" in str(e):
            return False
        raise
    finally:
        db.close()


def holders(path: Path) -> list[str]:
    """"pid N (name)" of each other process with the store (or its -wal/-shm) open; [] where unknown."""
    targets = {str(Path(f"{path}{suffix}").resolve()) for suffix in ("", "-wal", "-shm")}
    found = []
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
    except OSError:  # no /proc (macOS): the holder stays unnamed
        return []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in targets for fd in fds):
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                found.append(f"pid {pid} ({name})")
        except OSError:  # another user's process, or one that just ended
            continue
    return sorted(found, key=lambda h: int(h.split()[1]))


def locked_message(path: Path, wait_s: float = LOCK_WAIT_S) -> str:
    """The one-line refusal for a store another process holds."""
    who = holders(path)
    by = f"by {', '.join(who[:3])}" if who else "by another process"
    return (f"{path} is locked {by} (waited {wait_s:g} s): end that process or its transaction, then resume again")
