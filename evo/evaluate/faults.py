"""Classifying what went wrong: an exception (or its text) becomes an evaluation status and a short reason.

Every fault of a candidate kernel must end as a stored row with a status, never as a stopped search. The
rules below match on exception types by name and on message text, because the same fault surfaces through
different layers (Triton, torch, the CUDA driver) and across Triton versions with different classes.
A `fatal` fault has poisoned the CUDA context: the process that saw it must exit and be replaced.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from typing import Literal

__all__ = ["Fault", "classify", "useful_lines", "describe"]

Phase = Literal["compile", "run"]


@dataclass(frozen=True)
class Fault:
    status: str
    reason: str
    fatal: bool = False  # the CUDA context is lost: the process must not launch anything again


# (status, fatal, type names, message patterns); the first rule that matches wins, so order matters:
# "CUDA out of memory" must not be read as a CUDA error that poisons the context, and a launch that asks for
# too many resources is not a crash.
_RULES: tuple[tuple[str, bool, tuple[str, ...], tuple[str, ...]], ...] = (
    ("timeout", False, ("TimeoutError",), (r"timed out", r"\btimeout\b", r"\bTimeoutError\b")),
    ("out_of_resources", False, ("OutOfResources",), (
        r"out of resource", r"too many resources requested", r"CUDA_ERROR_OUT_OF_RESOURCES",
        r"uses too much shared data", r"exceeds? .*shared memory", r"shared memory .*exceed",
        r"too much (shared|local) memory",
    )),
    ("error", False, ("OutOfMemoryError",), (r"CUDA out of memory", r"CUDA_ERROR_OUT_OF_MEMORY",
                                             r"out of memory")),
    ("crashed", True, ("AcceleratorError",), (
        r"illegal memory access", r"CUDA_ERROR_ILLEGAL_ADDRESS", r"illegal instruction",
        r"CUDA_ERROR_ILLEGAL_INSTRUCTION", r"misaligned address", r"CUDA_ERROR_MISALIGNED_ADDRESS",
        r"unspecified launch failure", r"CUDA_ERROR_LAUNCH_FAILED", r"device-side assert",
        r"hardware stack error", r"CUDA_ERROR_HARDWARE_STACK_ERROR", r"invalid program counter",
        r"warp (out-of-range|misaligned)", r"CUDA error", r"cudaError", r"CUDA_ERROR_\w+",
    )),
    # a process left broken (an import interrupted halfway), not the kernel: never served again as its verdict
    ("error", False, ("KeyboardInterrupt",), (r"partially initialized module", r"KeyboardInterrupt")),
    ("compile_error", False, ("CompilationError", "PTXASError", "SyntaxError", "IndentationError", "MLIRError",
                              "UnsupportedLanguageConstruct", "CompileTimeAssertionFailure",
                              "InterpreterError"), (  # the interpreter (smoke mode) meets kernel-body errors late
        r"PTXAS error", r"ptxas (fatal|error)", r"LLVM ERROR", r"PassManager::run failed",
        r"failed to legalize", r"^at \d+:\d+:",
    )),
)


def useful_lines(text: str, limit: int = 1500) -> str:
    """The informative tail of an error message: no blank lines, no Python traceback frames, at most
    `limit` characters (the end of a compiler message is where the error is)."""
    lines = [ln.rstrip() for ln in str(text).splitlines()]
    lines = [ln for ln in lines if ln.strip() and not ln.startswith("Traceback (most recent call last)")
             and not re.match(r"\s+File \".*\", line \d+", ln)]
    out = "\n".join(lines)
    if len(out) > limit:
        out = "..." + out[-(limit - 3):]
    return out


def _type_names(exc: BaseException) -> set[str]:
    names = {cls.__name__ for cls in type(exc).__mro__}
    # torch and Triton often wrap the real error; its type is what tells the fault apart
    inner = exc.__cause__ or exc.__context__
    while inner is not None and len(names) < 64:
        names |= {cls.__name__ for cls in type(inner).__mro__}
        inner = inner.__cause__ or inner.__context__
    return names


def _messages(exc: BaseException) -> str:
    parts, inner, seen = [], exc, 0
    while inner is not None and seen < 8:
        parts.append(f"{type(inner).__name__}: {inner}")
        inner, seen = inner.__cause__ or inner.__context__, seen + 1
    return "\n".join(parts)


def classify(fault: BaseException | str, phase: Phase = "run") -> Fault:
    """The status of a fault: an exception, or the text a dead process left behind.

    `phase` decides what an unrecognised fault is: while compiling (rendering, importing, Triton, ptxas)
    it is a compile_error of the candidate; while running it is an `error` (not a property of the kernel
    we can be sure of, so it is not served again from the store).
    """
    if phase not in ("compile", "run"):
        raise ValueError(f"phase must be 'compile' or 'run', got {phase!r}")
    if isinstance(fault, BaseException):
        names = _type_names(fault)
        text = _messages(fault)
    else:
        names, text = set(), str(fault)
    for status, fatal, types, patterns in _RULES:
        if names & set(types) or any(re.search(p, text, re.IGNORECASE | re.MULTILINE)
                                     for p in patterns):
            return Fault(status, useful_lines(text), fatal)
    return Fault("compile_error" if phase == "compile" else "error", useful_lines(text))


def describe(exc: BaseException) -> str:
    """The exception with its traceback, for logs (rows keep `classify(...).reason`)."""
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
