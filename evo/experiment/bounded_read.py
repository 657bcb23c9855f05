"""Reading a file the user names without trusting its size: `evo run /dev/zero` or a multi-gigabyte file given by
mistake must be refused by size, not read into memory first (the kernel's out-of-memory killer would end it).

A regular file's size is known before reading, so it is refused at once; a device, a pipe or a FIFO has no size,
so at most `limit` + 1 bytes of it are read and one byte too many is the refusal.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["TooLarge", "read_text_bounded"]


class TooLarge(ValueError):
    """More than the limit; the message is one line without the file name (the caller adds it)."""


def read_text_bounded(path: str | Path, limit: int, why: str = "an experiment file is a page of YAML") -> str:
    """The UTF-8 text of `path`, refusing (TooLarge, saying `why` the limit is sane) anything over `limit` bytes
    before reading it all. Raises OSError (FileNotFoundError, IsADirectoryError, ...) and UnicodeDecodeError as
    reading would."""
    too_large = TooLarge(f"is larger than {limit >> 10} KiB; {why}")
    with open(path, "rb") as f:
        info = os.fstat(f.fileno())
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(21, "Is a directory", str(path))
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise too_large
        data = f.read(limit + 1)  # a stream of unknown size: one byte past the limit is enough to know
    if len(data) > limit:
        raise too_large
    return data.decode("utf-8")
