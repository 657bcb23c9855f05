"""The run owns the Ray instance it starts: a guard process ends every Ray process the run started when the run
ends, however it ends.

Ray's own clean-up runs in the driver, so `kill -9` of `evo run` skips it; the raylet and GCS then notice and exit,
but Ray's dashboard and runtime-env agents are left running under PID 1, ignoring SIGTERM. The guard is a small
process in a session of its own (a Ctrl-C in the terminal does not reach it) that watches the driver through a
pipe: it keeps a list of the driver's descendants that appeared after it started (sampled from /proc ten times
a second while Ray starts, then twice), and when the pipe closes (the driver closed it after Ray's clean-up, or
the driver died) it SIGKILLs those of them still alive, with their own descendants. Each is identified by pid
and start time, so a pid reused by an unrelated process is never touched. Linux only (elsewhere the guard does nothing).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["RayGuard", "descendants", "children_named", "all_alive"]

_PROC = Path("/proc")
_SAMPLE_S = 0.5
_STARTUP_SAMPLE_S = 0.1  # while Ray starts its daemons (the first minute), sample often: a kill may come any time
_STARTUP_S = 60.0


def _stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, start time, state) of a live process, or None."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), int(fields[19]), fields[0]


def _table() -> dict[int, tuple[int, int, str]]:
    out = {}
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                out[int(entry.name)] = st
    return out


def descendants(roots: set[int], table: dict[int, tuple[int, int, str]] | None = None) -> dict[int, int]:
    """{pid: start time} of every live descendant of the processes `roots` (not the roots themselves)."""
    table = _table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, int] = {}
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out and table[child][2] != "Z":
                out[child] = table[child][1]
                todo.append(child)
    return out


def children_named(parent: int, names: tuple[str, ...]) -> dict[int, int]:
    """{pid: start time} of the live children of `parent` whose command name (/proc/PID/comm) is one of `names`."""
    out = {}
    for pid, (ppid, start, state) in _table().items():
        if ppid == parent and state != "Z":
            try:
                comm = (_PROC / str(pid) / "comm").read_text().strip()
            except OSError:
                continue
            if comm in names:
                out[pid] = start
    return out


def all_alive(seen: dict[int, int]) -> bool:
    """Whether every process of `seen` ({pid: start time}) is still that process, and not a zombie."""
    for pid, start in seen.items():
        st = _stat(pid)
        if st is None or st[1] != start or st[2] == "Z":
            return False
    return True


class RayGuard:
    """Start with `RayGuard.start()` before Ray starts; `close()` after Ray's own shutdown."""

    def __init__(self, proc: subprocess.Popen | None) -> None:
        self._proc = proc

    @classmethod
    def start(cls) -> RayGuard:
        if not _PROC.is_dir():
            return cls(None)
        proc = subprocess.Popen([sys.executable, "-m", "evo.evaluate.ray_guard", str(os.getpid())],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
        proc.stdout.readline()  # "ready": it has noted what ran before Ray, which it must never touch
        return cls(proc)

    def close(self, timeout_s: float = 10.0) -> None:
        """Let the guard end what Ray left behind, and wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.stdin.close()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def _kill(seen: dict[int, int]) -> None:
    """SIGKILL the processes of `seen` that are still the same processes, and their descendants."""
    for _ in range(3):  # again: a parent may have spawned a child between the table and its death
        table = _table()
        alive = {pid for pid, start in seen.items() if pid in table and table[pid][1] == start
                 and table[pid][2] != "Z"}
        victims = alive | set(descendants(alive, table))
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)


def _watch(driver: int) -> None:
    before = set(descendants({driver})) | {os.getpid()}
    print("ready", flush=True)
    seen: dict[int, int] = {}
    started = time.monotonic()
    while True:
        for pid, start in descendants({driver}).items():
            if pid not in before:
                seen.setdefault(pid, start)
        every = _STARTUP_SAMPLE_S if time.monotonic() - started < _STARTUP_S else _SAMPLE_S
        readable, _, _ = select.select([sys.stdin], [], [], every)
        if readable and not os.read(sys.stdin.fileno(), 4096):  # EOF: the driver closed the pipe or died
            break
    driver_alive = _stat(driver) is not None
    if driver_alive:  # a clean shutdown: leave the driver's own children be, end what was orphaned
        table = _table()
        seen = {pid: start for pid, start in seen.items() if pid in table and table[pid][0] != driver}
    _kill(seen)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _watch(int(sys.argv[1]))
