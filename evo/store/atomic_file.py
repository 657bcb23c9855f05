"""Writing a whole file or nothing: reports, exported kernels and result files are written to a temporary file in
the same directory and renamed over the target only once every byte is on disk.

A full disk, a quota, a signal or a crash halfway through a plain write leaves a truncated file under the final
name: an HTML report that renders half a page, an exported module that fails to import. A rename within one
directory is atomic, so a reader sees the old file or the new one, never a part; on failure the temporary is
removed and any earlier file under the name is untouched.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_atomic"]


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text is UTF-8) to `path` atomically; raises OSError, leaving no partial or temporary file."""
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # the name of a dotfile beside the target: same file system (so the rename is atomic), hidden from listings
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, _mode(path))
    try:
        try:
            view = memoryview(payload)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)  # the bytes reach the disk before the name does
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _mode(path: Path) -> int:
    """The permissions of the file being replaced, or the usual ones (the umask applies) for a new file."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666
