"""What Ray prints goes to a log file, not to the terminal of the run that started it.

Ray writes in three ways: its C++ core writes warnings and errors to the process's descriptor 2 (a raylet that
dies brings a dozen of them), its Python loggers write to their handlers' streams, and a thread of the driver
prints what other Ray processes report (a dead raylet's last state: some fifty lines) to `sys.stdout`. While a
`RayOutput` is open, descriptor 2 is the log file, the "ray" logger writes there, and what Ray's own threads
(named ray_*) write to `sys.stdout` or `sys.stderr` goes there too; `sys.stderr` becomes a stream on the terminal's
descriptor, so evo's own lines (and a traceback, if one ever comes) still reach the user.
"""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

__all__ = ["RayOutput"]

_RAY_THREADS = "ray_"  # Ray names its driver threads ray_listen_error_messages, ray_print_logs, ...


class _Router(io.TextIOBase):
    """A text stream that sends what Ray's threads write to `log` and everything else to `usual`; everything, while
    `all_to_log` is set (Ray's init and shutdown run in the caller's thread)."""

    def __init__(self, usual: TextIO, log: TextIO) -> None:
        self.usual, self.log = usual, log
        self.all_to_log = False

    def _target(self) -> TextIO:
        ray_thread = threading.current_thread().name.startswith(_RAY_THREADS)
        return self.log if self.all_to_log or ray_thread else self.usual

    def write(self, text: str) -> int:
        self._target().write(text)
        return len(text)

    def flush(self) -> None:
        for stream in (self.usual, self.log):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    def isatty(self) -> bool:
        try:  # asked at exit too (Ray's colorama resets the terminal), when the usual stream may be closed
            return self.usual.isatty()
        except (OSError, ValueError):
            return False

    def fileno(self) -> int:
        return self.usual.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.usual, "encoding", "utf-8")


def _fd(stream: TextIO | None) -> int | None:
    try:
        return stream.fileno() if stream is not None else None
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return None


class RayOutput:
    """`open()` before Ray starts, `close()` after it stopped; the log is appended to (a resumed run adds to it)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._log: TextIO | None = None
        self._saved_fd: int | None = None
        self._saved: tuple[TextIO, TextIO] | None = None
        self._streams: tuple[TextIO, TextIO] | None = None
        self._logger: tuple[list[logging.Handler], bool] | None = None

    def open(self) -> RayOutput:
        if self._log is not None:
            return self
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._log = open(fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace")  # noqa: SIM115
        for stream in (sys.stdout, sys.stderr):  # what is buffered belongs where it was going
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        self._saved_fd = os.dup(2)
        os.dup2(self._log.fileno(), 2)
        out, err = sys.stdout, sys.stderr
        terminal: TextIO = err
        if _fd(err) == 2:  # the Python stream on descriptor 2 now writes to the log: evo's lines need their own
            terminal = open(os.dup(self._saved_fd), "w", buffering=1,  # noqa: SIM115 (closed in close())
                            encoding=getattr(err, "encoding", None) or "utf-8", errors="backslashreplace")
        self._saved = (out, err)
        self._streams = (_Router(out, self._log), _Router(terminal, self._log))
        sys.stdout, sys.stderr = self._streams
        ray_logger = logging.getLogger("ray")
        self._logger = (list(ray_logger.handlers), ray_logger.propagate)
        for handler in self._logger[0]:
            ray_logger.removeHandler(handler)
        ray_logger.addHandler(logging.StreamHandler(self._log))
        ray_logger.propagate = False
        return self

    @contextmanager
    def all_of_it(self) -> Iterator[None]:
        """While Ray starts or stops in this thread, what it writes from here goes to the log too (its shutdown
        flushes the messages its threads held back)."""
        routers = self._streams or ()
        for router in routers:
            router.all_to_log = True
        try:
            yield
        finally:
            for router in routers:
                router.all_to_log = False

    def close(self) -> None:
        if self._log is None:
            return
        ray_logger = logging.getLogger("ray")
        if self._logger is not None:
            for handler in list(ray_logger.handlers):
                ray_logger.removeHandler(handler)
            for handler in self._logger[0]:
                ray_logger.addHandler(handler)
            ray_logger.propagate = self._logger[1]
        if self._saved is not None and self._streams is not None:
            terminal = self._streams[1].usual
            if sys.stdout is self._streams[0]:
                sys.stdout = self._saved[0]
            if sys.stderr is self._streams[1]:
                sys.stderr = self._saved[1]
            if terminal is not self._saved[1]:
                try:
                    terminal.close()
                except (OSError, ValueError):
                    pass
        if self._saved_fd is not None:
            try:
                sys.stderr.flush()
            except (OSError, ValueError, AttributeError):
                pass
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
        self._log.close()
        self._log, self._saved_fd, self._saved, self._streams, self._logger = None, None, None, None, None
