"""Output that can never end a run: a closed or broken stdout/stderr drops progress, the store keeps everything.

`evo run ... >&-`, a `| head` that exits, a terminal that went away: a write then raises (or, with descriptor 1
closed at start, the store itself may be opened as descriptor 1 and a child's print would land in it). Standard
descriptors that are closed are reopened on /dev/null before anything else is opened, and the run's progress
goes through a stream that stops writing, quietly, at its first failure.
"""

from __future__ import annotations

import os
import sys
from typing import TextIO

__all__ = ["DroppingStream", "reopen_closed_std_fds", "say"]


def reopen_closed_std_fds() -> None:
    """Point each closed descriptor of 0, 1, 2 at /dev/null (open() takes the lowest free one), and give Python a
    stream for a missing sys.stdout/sys.stderr."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:  # a lower descriptor was free too: it is handled in its own turn
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (lives as long as the process)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115


class DroppingStream:
    """A text stream that forwards to `stream` until a write or flush fails, then drops everything."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self.dropped = stream is None

    def write(self, text: str) -> int:
        if not self.dropped:
            try:
                self._stream.write(text)
            except (OSError, ValueError):  # broken pipe, closed file, full disk behind a redirect
                self.dropped = True
        return len(text)

    def flush(self) -> None:
        if not self.dropped:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.dropped = True

    def isatty(self) -> bool:
        try:
            return not self.dropped and self._stream.isatty()
        except (OSError, ValueError):
            return False


def say(text: str, stream: TextIO | None = None) -> None:
    """Print one line to stderr (or `stream`) when it can be printed; a run's end never fails on its message."""
    out = DroppingStream(stream if stream is not None else sys.stderr)
    out.write(text + "\n")
    out.flush()
