"""The parts of a rendered GEMM launcher that a fused epilogue changes (operators/gemm/epilogue.py).

The launcher's templates (operators/gemm/launcher.py) carry markers where an epilogue adds to them: its
operands in every signature from `_plan` to the entry function (EPILOGUE_ARGS), their signatures in the plan
key (EPILOGUE_KEY), their checks (EPILOGUE_CHECKS), SwiGLU's halving of B's columns (SWIGLU_SPLIT) and what an
empty K gives (EMPTY_K). Without an epilogue every marker is filled with what a plain GEMM had before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators._template import block as _block

__all__ = ["epilogue_args", "epilogue_operands", "fill_epilogue"]

_BIAS = _block("""
    if not (isinstance(bias, torch.Tensor) and tuple(bias.shape) == (N,) and bias.dtype == dtype
            and bias.device == device and bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous vector of N={N} {dtype} values on {device}")
""", 1)
_RESIDUAL = _block("""
    if not (isinstance(residual, torch.Tensor) and tuple(residual.shape) == (M, N) and residual.dtype == dtype
            and residual.device == device and residual.is_contiguous()):
        raise ValueError(f"residual must be a contiguous {M}x{N} {dtype} tensor on {device}")
""", 1)
_SCALE = _block("""
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):  # checked once per plan; every call
        raise ValueError(f"scale must be a Python number, got {type(scale).__name__}")  # passes float(scale)
""", 1)
_SWIGLU_SPLIT = _block("""
    if N % 2:
        raise ValueError(f"SwiGLU needs B[K, 2N] (the gate's columns, then the up projection's); B has {N} columns")
    N //= 2
""", 1)
_EMPTY_K_REFUSED = _block("""
    if K == 0:  # the epilogue of an empty product is not all zeros: refused rather than guessed
        raise ValueError("K=0: the product is empty; a fused epilogue needs K > 0")
""", 1)
_EMPTY_K_ZEROS = _block("""
    if K == 0:
        return lambda a, b, out: (new_out() if out is None else out).zero_()
""", 1)


def epilogue_args(g: Mapping[str, Any]) -> str:
    """The epilogue's operands of the entry function, as "bias, residual, " (empty without an epilogue)."""
    ep = g.get("epilogue")
    return "".join(f"{name}, " for name in ep.operands) if ep else ""


def epilogue_operands(g: Mapping[str, Any]) -> list[str]:
    """The epilogue's operands as a launch passes them: the scale as a float on every call (Triton would compile
    an int 1 as a constant, and the bound launch reuses the first call's kernel)."""
    ep = g.get("epilogue")
    return ["float(scale)" if n == "scale" else n for n in (ep.operands if ep else ())]


def fill_epilogue(text: str, g: Mapping[str, Any]) -> str:
    """`text` (the launcher's plan and entry) with every epilogue marker filled in for genome values `g`."""
    ep = g.get("epilogue")
    checks = ""
    if ep:
        checks = (_BIAS if ep.bias else "") + (_RESIDUAL if ep.residual else "") + (_SCALE if ep.scale else "")
    what = f"A @ B with the fused epilogue {ep.name}" if ep else "A @ B"
    key = "".join(f"signature({name}), " for name in (ep.operands if ep else ()) if name != "scale")
    return (text.replace("SWIGLU_SPLIT\n", _SWIGLU_SPLIT if ep and ep.swiglu else "")
            .replace("EPILOGUE_CHECKS\n", checks)
            .replace("EMPTY_K\n", _EMPTY_K_REFUSED if ep else _EMPTY_K_ZEROS)
            .replace("Returns run(a, b, out)", f"Returns run(a, b, {epilogue_args(g)}out)")
            .replace("EPILOGUE_ARGS", epilogue_args(g)).replace("EPILOGUE_KEY", key)
            .replace("C = WHAT", f"C = {what}"))
