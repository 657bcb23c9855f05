"""A supervised child process: requests go in one at a time, with a time limit; a child that hangs is
killed, a child that dies is replaced, and the caller always gets either a reply or a clear exception.

The child is started with "spawn" (never fork: a forked CUDA context is unusable) and talks over a Pipe.
It runs `setup(*setup_args)` once, replies "ready" with the info it returns, then answers each request
with `handler(state, request)`. A handler whose process is no longer fit to serve (a CUDA context lost to
an illegal address) returns `ExitAfter(reply)`: the reply is delivered, then the child exits and is replaced.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evo.evaluate.faults import classify, describe

__all__ = ["Supervised", "ExitAfter", "ChildTimeout", "ChildDied", "ChildRaised"]


@dataclass
class ExitAfter:
    reply: Any


class ChildTimeout(Exception):
    """The child gave no reply in time; it was killed."""


class ChildDied(Exception):
    """The child process ended without replying (crash, os._exit, signal), or could not start."""


class ChildRaised(Exception):
    """The handler raised: the message is the exception's type name, text and traceback; `fatal` when it lost
    the process (a CUDA context), which was then replaced."""

    def __init__(self, message: str, fatal: bool) -> None:
        super().__init__(message)
        self.fatal = fatal


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by signal {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _child_main(conn: Any, env: dict[str, str], setup: Callable[..., tuple[Any, Any]], setup_args: tuple[Any, ...],
                handler: Callable[[Any, Any], Any]) -> None:
    # a reply sent before os._exit stays readable: the parent reads it from the pipe after the process is gone
    os.environ.update(env)  # before anything initialises CUDA or Triton in this process
    try:
        state, info = setup(*setup_args)
    except BaseException as exc:  # report why, then die: the parent raises ChildDied with this text
        conn.send(("setup_failed", None, describe(exc)))
        os._exit(3)
    conn.send(("ready", None, info))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None  # the parent is gone
        if msg is None:
            os._exit(0)
        request_id, request = msg
        try:
            reply = handler(state, request)
        except BaseException as exc:
            exits = classify(exc).fatal
            conn.send(("raised", request_id, (f"{type(exc).__name__}: {describe(exc)}", exits)))
        else:
            exits = isinstance(reply, ExitAfter)
            conn.send(("final", request_id, reply.reply) if exits else ("reply", request_id, reply))
        if exits:
            os._exit(4)


class Supervised:
    """One supervised child. Not thread-safe: one request at a time (the caller serialises)."""

    def __init__(self, setup: Callable[..., tuple[Any, Any]], handler: Callable[[Any, Any], Any], *,
                 setup_args: tuple[Any, ...] = (), env: dict[str, str] | None = None, name: str = "child",
                 start_timeout_s: float = 300.0) -> None:
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be positive, got {start_timeout_s}")
        self.setup, self.handler, self.setup_args = setup, handler, setup_args
        self.env, self.name, self.start_timeout_s = dict(env or {}), name, start_timeout_s
        self.starts = 0  # processes started so far (1 + replacements)
        self.served = 0  # requests sent to the current process
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None
        self._info: Any = None
        self._ready, self._next_id = False, 0

    @property
    def restarts(self) -> int:
        return max(0, self.starts - 1)

    def start(self) -> None:
        """Start a child if none is running (returns at once; `wait_ready()` waits for it)."""
        if self._alive():
            return
        self._reap()
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=_child_main, name=self.name, daemon=True,
                                 args=(child, self.env, self.setup, self.setup_args, self.handler))
        try:
            proc.start()
        finally:
            child.close()
        self._proc, self._conn, self._ready, self.starts, self.served = proc, parent, False, self.starts + 1, 0

    def wait_ready(self) -> Any:
        """What the child's setup returned; starts the child and waits for it when needed."""
        self.start()
        if not self._ready:
            if not self._conn.poll(self.start_timeout_s):
                self.kill()
                raise ChildTimeout(f"{self.name} did not start within {self.start_timeout_s:.0f} s")
            try:
                kind, _, payload = self._conn.recv()
            except (EOFError, OSError):
                raise ChildDied(f"{self.name} died while starting ({_exit_text(self._reap())})") from None
            if kind != "ready":
                raise ChildDied(f"{self.name} failed to start ({_exit_text(self._reap())}):\n{payload}")
            self._info, self._ready = payload, True
        return self._info

    def kill(self) -> None:
        """Kill the child now (SIGKILL: a hung kernel ignores anything gentler) and wait for it."""
        if self._alive():
            self._proc.kill()
        self._reap()

    def close(self) -> None:
        if self._alive():
            try:
                self._conn.send(None)
                self._proc.join(timeout=10)
            except (OSError, ValueError):
                pass
        self.kill()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _reap(self) -> int | None:
        """Wait for the child that ended (or was killed) and let go of it; returns its exit code."""
        code = None
        if self._proc is not None:
            self._proc.join(timeout=30)
            code = self._proc.exitcode
            self._conn.close()
            try:
                self._proc.close()
            except ValueError:  # still running (the join timed out): leave it to the OS, never reuse it
                pass
        self._proc, self._conn, self._ready = None, None, False
        return code

    def _replace(self) -> str:
        """Start a replacement for the child that ended; returns how that one ended."""
        ended = _exit_text(self._reap())
        self.start()
        return ended

    def call(self, request: Any, timeout_s: float) -> Any:
        """The handler's reply to `request`. Raises ChildTimeout (the child was killed), ChildDied (it
        ended without replying) or ChildRaised (the handler raised). A replacement child is started at
        once after any of these, so its start-up overlaps the caller's own work."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.wait_ready()
        self._next_id += 1
        self.served += 1
        try:
            self._conn.send((self._next_id, request))
        except (OSError, ValueError):
            raise ChildDied(f"{self.name} was gone before the request ({self._replace()})") from None
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._conn.poll(left):
                self.kill()
                self.start()
                raise ChildTimeout(f"no reply from {self.name} within {timeout_s:g} s; the process was killed")
            try:
                kind, reply_id, payload = self._conn.recv()
            except (EOFError, OSError):
                raise ChildDied(f"{self.name} died ({self._replace()})") from None
            if reply_id == self._next_id:  # a stale reply (of a call interrupted in its wait) is skipped
                break
        if kind == "final" or (kind == "raised" and payload[1]):  # the child exits after it: replace it now
            self._replace()
        if kind == "raised":
            raise ChildRaised(*payload)
        return payload
