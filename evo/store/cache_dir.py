"""Where evo keeps what outlives a run (the shared results database) when the experiment names no place.

`Path.home()` is not a cache directory everywhere: HOME may be unset (cron, systemd units, containers), point at
'/' (daemon users) or at a directory this user cannot write. Taking it blindly put the cache in `/.cache` or in a
directory that does not exist. The platform's cache directory is used where it can be written, else the run
directory the caller names (the cache then lives with the run), else the system's temporary directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["cache_root"]


def _writable(path: Path) -> bool:
    """`path` can be created or written: the nearest existing ancestor (or itself) is a writable directory."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


def _platform_cache() -> Path | None:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):  # the XDG spec ignores a relative value
        return Path(xdg)
    home = os.environ.get("HOME", "")
    if not home:
        try:
            home = str(Path.home())  # the password database's entry
        except (RuntimeError, KeyError):
            return None
    if not os.path.isabs(home) or Path(home) == Path("/"):
        return None
    return Path(home) / ".cache"


def cache_root(fallback: Path | None = None) -> Path:
    """The directory evo's cache goes in: the platform's when writable, else `fallback`, else the temp dir."""
    platform = _platform_cache()
    if platform is not None and _writable(platform):
        return platform
    if fallback is not None:
        return Path(fallback)
    return Path(tempfile.gettempdir()) / f"evo-cache-{os.getuid()}"
