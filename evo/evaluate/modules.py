"""Loading rendered kernel source as a Python module.

Triton reads a kernel's source from its file, so rendered source is written to a file named by its hash
(under a cache directory) before it is imported. The same source always maps to the same file.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from evo.store.sources import source_hash  # a kernel's identity, as the store keys kept sources by it

__all__ = ["source_hash", "write_source", "load_source", "kernel_dir"]


def kernel_dir() -> Path:
    """Where rendered modules are written: $EVO_KERNEL_DIR, else a per-user temporary directory."""
    path = Path(os.environ.get("EVO_KERNEL_DIR") or Path(tempfile.gettempdir()) / f"evo-kernels-{os.getuid()}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_source(source: str, directory: Path | None = None) -> Path:
    path = (directory or kernel_dir()) / f"k_{source_hash(source)}.py"
    if not path.exists() or path.read_text() != source:
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(source)
        tmp.replace(path)  # atomic: concurrent writers of the same source never see a half file
    return path


def load_source(source: str, directory: Path | None = None) -> ModuleType:
    """Import rendered source as a fresh module (cached by hash within a process)."""
    path = write_source(source, directory)
    name = f"evo_kernel_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
