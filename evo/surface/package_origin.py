"""Which evo is running: a folder named `evo` beside a script hides the installed package (issue 41).

Python looks for `import evo` in the script's directory (or the current one, for `python -m` and `-c`) before
site-packages. A folder there named `evo` without an `__init__.py` — a clone of evo's repository, whose package is
`evo/evo/` — is imported as a namespace package: `from evo import __version__` then fails with a cryptic
ImportError, and the submodules an editable install still finds are the installed ones, not the clone's. evo's
entries (the command line, evo.api's loaders, the export header) ask here first and say so in one line.
"""

from __future__ import annotations

import importlib.util
import sys

__all__ = ["ShadowedPackage", "shadowing_folder", "evo_version"]


class ShadowedPackage(ImportError):
    """The name `evo` is a folder that is not evo's package; one line saying what to do."""


def shadowing_folder() -> str | None:
    """The folder imported as `evo` in place of the package, or None when `evo` is the package itself."""
    evo = sys.modules.get("evo")
    if evo is None or getattr(evo, "__file__", None):  # a regular package has a file: its __init__.py
        return None
    path = list(getattr(evo, "__path__", []))
    return path[0] if path else "?"


def evo_version() -> str:
    """The running evo's version; ShadowedPackage when a folder named evo hides the package."""
    folder = shadowing_folder()
    if folder is not None:
        raise ShadowedPackage(_message(folder))
    from evo import __version__

    return __version__


def _message(folder: str) -> str:
    try:
        spec = importlib.util.find_spec("evo.api")  # found by an editable install's finder, past the folder
        installed = f" (the installed one is at {spec.origin.rsplit('/', 1)[0]})" if spec and spec.origin else ""
    except (ImportError, ValueError):
        installed = ""
    return (f"the folder {folder} was imported as the package evo{installed}: Python looks beside the script (or in "
            "the current directory) first, and a folder named evo there, such as a clone of evo's repository, hides "
            "the package; run from another directory, or rename that folder (e.g. evo-src)")
