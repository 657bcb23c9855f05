"""No GPU: evo's kernels run in Triton's CPU interpreter, everywhere alike (issue 41).

One rule for evo.api.load / load_zoo and the self-checks of `evo export` and `evo zoo --collect` modules (which
carry their own copy of it, being standalone: evo.surface.export's preamble): on a machine where torch sees no
GPU and TRITON_INTERPRET is not set, set TRITON_INTERPRET=1 and say so in one line (NO_GPU_LINE). Triton chooses
between compiling and interpreting when a function is decorated with @triton.jit, its own helpers (tl.cdiv,
tl.sum, ...) when triton is imported: a process that imported triton before the switch cannot run kernels at all
(Triton's "0 active drivers"), and is refused in one line instead.
"""

from __future__ import annotations

import os
import sys

__all__ = ["NO_GPU_LINE", "NoDevice", "use_interpreter_without_gpu"]

NO_GPU_LINE = ("no GPU here: evo's kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1), "
               "which checks results but is no measure of speed")
_ON = ("1", "true", "yes", "on", "y")


class NoDevice(RuntimeError):
    """Neither a GPU nor the interpreter can run kernels in this process; one line saying what to do."""


def use_interpreter_without_gpu() -> bool:
    """Switch this process to Triton's interpreter where there is no GPU; True when it switched (the caller says so
    with NO_GPU_LINE), False when nothing was needed (a GPU, or the interpreter already chosen). Raises NoDevice
    where there is no GPU and the interpreter can no longer be (or was told not to be) chosen."""
    value = os.environ.get("TRITON_INTERPRET")
    if value is not None and value.strip().lower() in _ON:
        return False
    import torch

    if torch.cuda.is_available():
        return False
    if value is not None and value.strip():
        raise NoDevice(f"no GPU here, and TRITON_INTERPRET={value} turns off Triton's CPU interpreter: unset it (or "
                       "set it to 1) to run evo's kernels in the interpreter")
    if "triton" in sys.modules and not _interpreting():
        raise NoDevice("no GPU here, and triton was imported before evo could switch it to its CPU interpreter "
                       "(Triton chooses at import): set TRITON_INTERPRET=1 before importing triton, or call evo "
                       "first")
    os.environ["TRITON_INTERPRET"] = "1"
    return True


def _interpreting() -> bool:
    """Whether the imported triton decorated its own helpers for the interpreter."""
    try:
        import triton.language as tl

        return type(tl.cdiv).__name__ == "InterpretedFunction"
    except Exception:  # a triton that imports halfway or has no cdiv: do not guess it can interpret
        return False
