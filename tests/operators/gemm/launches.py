"""A rendered module loaded for recording its launches on the CPU (evo.evaluate.compiler.record_launches), in a test
process that runs the Triton interpreter."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from evo.evaluate.modules import load_source, write_source

__all__ = ["load_jit"]


def load_jit(source: str) -> ModuleType:
    """The rendered module with its @triton.jit kernels as JIT functions (which the recorder swaps), not the
    interpreter's: loaded afresh, and the process's cached module of the same text (another test's) left as it was."""
    from triton.experimental import gluon  # noqa: F401  (imported first as this process's triton.language is)

    name = f"evo_kernel_{write_source(source).stem}"
    cached = sys.modules.pop(name, None)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "0")
        module = load_source(source)
    sys.modules.pop(name)
    if cached is not None:
        sys.modules[name] = cached
    return module
