"""Writing a whole file or nothing, and only ever a regular file: reports, exported kernels, bench results and the
run's experiment copy are all written here (`write_atomic`), to a temporary file beside the target that is renamed
over it once every byte is on disk.

A full disk, a quota, a signal or a crash halfway through a plain write leaves a truncated file under the final
name: an HTML report that renders half a page, an exported module that fails to import. A rename within one
directory is atomic, so a reader sees the old file or the new one, never a part; on failure the temporary is
removed and any earlier file under the name is untouched.

A rename replaces whatever has the name, so the path is looked at first (`output_target`). A symbolic link to a
regular file (or to a free name in an existing folder) is written through, as a shell's `>` would: its target is
replaced atomically and the link stays. Anything else at the path, or at the end of its links, is refused with
`NotARegularFile` (an OSError whose strerror says what is there), never replaced: a device such as /dev/null or
/dev/full, a FIFO, a socket, a directory, a link loop, a link into a folder that does not exist, or a link to a
process's open file (/dev/stdout, /proc/PID/fd/N).
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["write_atomic", "output_target", "NotARegularFile"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
_NEVER = "evo writes only regular files and never replaces anything else; choose another path"
_MAX_HOPS = 40  # as the kernel's own limit on links followed


class NotARegularFile(OSError):
    """An output path that is not, and does not lead to, a regular file or a free name; `strerror` says what it is
    and what to do."""

    def __init__(self, path: Path, what: str, hint: str = _NEVER) -> None:
        super().__init__(errno.EINVAL, f"{what}; {hint}", str(path))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def output_target(path: str | Path) -> Path:
    """The file a write to `path` replaces: `path` itself, or the end of its symbolic links. Raises
    NotARegularFile (what is there, in its strerror) unless that is a regular file or a free name in an existing
    folder."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return path  # a free name: the temporary file's creation says whether the folder exists and is writable
    if stat.S_ISREG(st.st_mode):
        return path
    if not stat.S_ISLNK(st.st_mode):
        raise NotARegularFile(path, f"it is {_kind(st.st_mode)}")
    _refuse_descriptor_links(path)
    try:
        end = os.stat(path)  # follows every link
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotARegularFile(path, "it is a symbolic link in a loop (it never reaches a file)") from None
        if e.errno != errno.ENOENT:
            raise
        target = Path(os.path.realpath(path))  # a dangling link: where its chain ends
        if not target.parent.is_dir():
            raise NotARegularFile(path, f"it is a symbolic link to {target}, whose folder does not exist",
                                  "create that folder, or choose another path") from None
        return target
    if not stat.S_ISREG(end.st_mode):
        raise NotARegularFile(path, f"it is a symbolic link to {os.path.realpath(path)}, {_kind(end.st_mode)}")
    return Path(os.path.realpath(path))


def _refuse_descriptor_links(path: Path) -> None:
    """/dev/stdout and the like lead through /proc/PID/fd to a process's open file: replacing the file behind it
    would leave that process writing to a file without a name, so such a link is refused (redirect with `>`)."""
    hop = Path(os.path.abspath(path))
    for _ in range(_MAX_HOPS):
        if hop.parts[:2] == ("/", "proc") or hop.parts[:3] == ("/", "dev", "fd"):
            raise NotARegularFile(path, f"it is a symbolic link to an open file descriptor ({hop})",
                                  "write to a file by name instead")
        try:
            link = Path(os.readlink(hop))
        except OSError:  # not a link (any more): the chain ends here
            return
        hop = link if link.is_absolute() else hop.parent / link


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """Write `data` (text is UTF-8) to `path` atomically (through a link, to its target); raises OSError, leaving
    no partial or temporary file, and NotARegularFile where the path is anything but a regular file or a link to
    one (see the module doc)."""
    target = output_target(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    # the name of a dotfile beside the target: same file system (so the rename is atomic), hidden from listings
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, _mode(target))
    try:
        try:
            view = memoryview(payload)
            while view:  # os.write may write less than asked
                view = view[os.write(fd, view):]
            os.fsync(fd)  # the bytes reach the disk before the name does
        finally:
            os.close(fd)
        _still_replaceable(target)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _still_replaceable(target: Path) -> None:
    """Refuse what was put at the target while the bytes were written (a FIFO, a link): never replaced."""
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotARegularFile(target, f"it became {'a symbolic link' if stat.S_ISLNK(mode) else _kind(mode)}")


def _mode(path: Path) -> int:
    """The permissions of the file being replaced, or the usual ones (the umask applies) for a new file."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return 0o666
