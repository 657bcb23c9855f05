"""One run directory, one writer: `evo run` holds an exclusive lock on its run directory while it runs.

The lock is an flock on the directory itself (no lock file to leave behind): the kernel drops it when the
holder exits, however it exits, so a crashed or killed run never leaves a directory stuck. The holder's pid is
written into `run.pid` beside the store, only to name it in the refusal. The descriptor is not inherited by child
processes (Ray's daemons), so they cannot keep a finished run's directory locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import TracebackType

__all__ = ["RunLock", "RunDirError", "PID_NAME", "check_run_path", "check_free", "check_writable"]

PID_NAME = "run.pid"


class RunDirError(ValueError):
    """The run directory cannot be used (a file is in the way, no permission, another run holds it); one line."""


def check_run_path(path: Path) -> None:
    """Raise RunDirError (one line) when `path` cannot become or be a run directory: a file, a file among its
    parents, or a symbolic-link loop. Path.exists() reads a loop as "missing", so without this the refusal came
    from mkdir, after the workers had started."""
    path = Path(path)
    try:
        os.stat(path)  # follows every link of every component: a loop anywhere shows here
    except FileNotFoundError:
        if os.path.islink(path):  # a link to nothing: mkdir would fail on it ("file exists")
            raise RunDirError(f"cannot make run directory {path}: it is a symbolic link to {os.readlink(path)}, "
                              f"which does not exist; choose another --out or output") from None
        return  # made by RunLock, with its parents
    except NotADirectoryError:
        blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        raise RunDirError(f"cannot make run directory {path}: {blocking or 'a parent'} is a file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RunDirError(f"cannot make run directory {path}: it, or a folder above it, is a symbolic link that "
                              f"loops back on itself; choose another --out or output") from None
        raise RunDirError(f"cannot use run directory {path}: {e.strerror or e}") from None
    if not path.is_dir():
        raise RunDirError(f"{path} is a file, not a run directory: choose another --out or output")


def check_free(path: Path) -> None:
    """Raise RunDirError (the refusal RunLock.acquire gives) when a live run holds run directory `path`: said before
    anything else about it, since neither --resume nor a new run can use it until that run ends."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # no directory (yet), or none this user may open: the lock's own refusal comes later
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken and at once given back: a probe, not a hold
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        raise RunDirError(_in_use(Path(path))) from None
    finally:
        os.close(fd)


def check_writable(path: Path) -> None:
    """Raise RunDirError (one line) when this user cannot write run directory `path`, or when it does not exist yet
    the folder it would be made in: said before a new run prints anything or starts a worker."""
    path = Path(path)
    target = next((p for p in (path, *path.parents) if p.exists()), None)
    if target is not None and not os.access(target, os.W_OK | os.X_OK):
        what = "the run directory" if target == path else f"the folder {path} would be made in,"
        raise RunDirError(f"cannot start a run in {path}: {what} {target} is not writable by this user; choose "
                          "another --out or output, or make it writable (chmod u+w)")


def _in_use(path: Path) -> str:
    try:
        pid = int((path / PID_NAME).read_text().strip())
    except (OSError, ValueError):
        pid = None
    holder = f" (pid {pid})" if pid is not None else ""
    return (f"{path} is in use by another evo run{holder}: one run directory takes one writer; wait for it to end "
            "(then --resume continues it), or use --out DIR for a new run")


class RunLock:
    """An exclusive, non-blocking lock on run directory `path`, created (with its parents) when missing.

    `created` says whether this lock made the directory, so that a run that fails to start can remove it again.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.created = False
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        check_run_path(self.path)
        try:
            self.created = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except (FileExistsError, NotADirectoryError):
            raise RunDirError(f"cannot make run directory {self.path}: a file is in the way") from None
        except OSError as e:
            raise RunDirError(f"cannot make run directory {self.path}: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirError(_in_use(self.path)) from None
        self._fd = fd
        try:
            (self.path / PID_NAME).write_text(f"{os.getpid()}\n")
        except OSError:  # the pid only names the holder in a refusal; the lock holds without it
            pass
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            (self.path / PID_NAME).unlink(missing_ok=True)
        except OSError:
            pass
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
                 ) -> None:
        self.release()
