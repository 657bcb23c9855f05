"""Correctness before speed: run a candidate on fresh random inputs and compare with the operator's reference.

The launcher runs twice. The first call compiles (or loads) the kernels and shows the output's layout; the
judged call writes into a buffer poisoned with NaN, so an element the kernel never writes cannot pass by
holding a stale right answer: passed as `out=` when the launcher takes it, else the first output, poisoned
in place and freed, is what the launcher's own allocation most likely reuses (and a launcher handing back a
buffer it kept shows NaN too). Both outputs are judged and the worse verdict stands; so does a change to the
inputs, except where an operator writes into them in place by design (`Operator.written`: a KV cache), whose
written part is judged as an output. The error measure is the relative Frobenius norm ||out - ref|| / ||ref|| against
`operator.tolerance(problem)`; any NaN or Inf in the output is status `nan`. Works on any device: the GPU
worker, the CPU smoke mode and `evo bench` use it alike.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["CheckResult", "flatten", "relative_error", "judge", "poisoned_like", "takes_out", "run_check",
           "check_launcher"]


@dataclass
class CheckResult:
    status: str  # ok | wrong | nan
    max_rel_error: float | None
    reason: str
    inputs: tuple[Any, ...] = ()
    out: Any = None  # the output buffer of the judged run, reused for timing when the launcher takes out=
    takes_out: bool = False


def flatten(x: Any) -> list[Any]:
    if isinstance(x, (tuple, list)):
        return [t for item in x for t in flatten(item)]
    return [x]


def relative_error(out: Any, ref: Any) -> float:
    """||out - ref||_F / ||ref||_F in float64 (absolute when the reference is all zeros)."""
    o, r = out.detach().double(), ref.detach().double()
    if o.shape != r.shape:
        raise ValueError(f"output shape {tuple(o.shape)} differs from the reference's {tuple(r.shape)}")
    num = float((o - r).norm())
    den = float(r.norm())
    return num / den if den > 0 else num


def judge(out: Any, ref: Any, tolerance: float) -> tuple[str, float | None, str]:
    """(status, worst relative error, reason) of an output against the reference."""
    outs, refs = flatten(out), flatten(ref)
    if len(outs) != len(refs):
        return "wrong", None, f"launcher returned {len(outs)} outputs, the reference {len(refs)}"
    worst = 0.0
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if tuple(o.shape) != tuple(r.shape):
            return "wrong", None, f"output {i} has shape {tuple(o.shape)}, the reference {tuple(r.shape)}"
        if o.is_floating_point() or o.is_complex():
            bad = int((~o.isfinite()).sum())
            if bad:
                return "nan", None, f"output {i} holds {bad} NaN/Inf of {o.numel()} elements (unwritten or overflow)"
        err = relative_error(o, r)
        if not math.isfinite(err):
            return "nan", None, f"output {i}: relative error is not finite"
        worst = max(worst, err)
    if worst > tolerance:
        return "wrong", worst, f"relative error {worst:.3g} exceeds the tolerance {tolerance:.3g}"
    return "ok", worst, ""


def poisoned_like(x: Any) -> Any:
    """A buffer like `x` (tensor or tuple of tensors) filled with NaN (float) or the largest value (integer)."""
    import torch

    if isinstance(x, (tuple, list)):
        return type(x)(poisoned_like(t) for t in x)
    if x.is_floating_point():
        return torch.full_like(x, float("nan"))
    return torch.full_like(x, torch.iinfo(x.dtype).max if x.dtype != torch.bool else True)


def takes_out(launcher: Callable[..., Any]) -> bool:
    try:
        return "out" in inspect.signature(launcher).parameters
    except (TypeError, ValueError):
        return False


def _synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def run_check(launcher: Callable[..., Any], operator: Any, problem: Any, seed: int,
              device: str = "cuda") -> CheckResult:
    """Run the launcher on fresh inputs made from `seed` and judge its output (`check_launcher`)."""
    inputs = tuple(operator.make_inputs(problem, seed, device=device))
    # the reference comes first, from untouched inputs: a kernel that writes into its own inputs would
    # otherwise agree with a reference computed from the damage
    return check_launcher(launcher, inputs, operator.reference(*inputs), operator.tolerance(problem), device,
                          written=getattr(operator, "written", None))


def _results(out: Any, inputs: tuple[Any, ...], written: Callable[..., Any] | None) -> Any:
    """What is judged of a run: its returned output, then copies of what it wrote into its inputs (if anything)."""
    parts = written(inputs) if written is not None else None
    return out if not parts else (out, *(p.clone() for p in parts))


def _unchanged_apart_from_written(inputs: tuple[Any, ...], pristine: list[Any],
                                  written: Callable[..., Any] | None) -> list[Any]:
    """Copies of the inputs with what the operator writes set back to its pristine values (the inputs themselves
    when it writes nothing): compared with the pristine inputs, they show a write anywhere else."""
    kept = tuple(k if k is not None else x for x, k in zip(inputs, pristine, strict=True))
    if written is None or not written(kept):
        return list(inputs)
    after = tuple(x.clone() if hasattr(x, "clone") else x for x in inputs)
    for part, original in zip(written(after), written(kept), strict=True):
        part.copy_(original)
    return list(after)


def check_launcher(launcher: Callable[..., Any], inputs: tuple[Any, ...], ref: Any, tol: float,
                   device: str = "cuda", written: Callable[..., Any] | None = None) -> CheckResult:
    """Judge `launcher(*inputs)` against `ref`, computed from these inputs untouched. Exceptions propagate
    (the caller classifies them).

    `written(inputs)` returns views of what an operator writes into its inputs in place (a KV cache), or None when
    it writes nothing (`Operator.written`): those are judged after the returned output (`ref` lists them after
    its results), set to NaN before the judged run so that a kernel cannot pass on values an earlier run left
    there, and every other element of the inputs must stay unchanged."""
    import torch

    pristine = [x.clone() if hasattr(x, "clone") else None for x in inputs]
    first = launcher(*inputs)
    _synchronize(device)
    first_verdict = judge(_results(first, inputs, written), ref, tol)
    for part in (written(inputs) if written is not None else None) or ():
        part.copy_(poisoned_like(part))
    with_out = takes_out(launcher)
    if with_out:
        out = poisoned_like(first)
        launcher(*inputs, out=out)
    else:  # poison the first output in place, unless it is (a view of) an input, and free it
        in_inputs = {x.untyped_storage().data_ptr() for x in inputs if hasattr(x, "untyped_storage")}
        for t in flatten(first):
            if hasattr(t, "untyped_storage") and t.untyped_storage().data_ptr() not in in_inputs:
                t.copy_(poisoned_like(t))
        _synchronize(device)
        del first
        out = launcher(*inputs)
    _synchronize(device)
    verdicts = [judge(_results(out, inputs, written), ref, tol), first_verdict]
    for i, (x, kept) in enumerate(zip(_unchanged_apart_from_written(inputs, pristine, written), pristine, strict=True)):
        # bitwise, with NaN equal to NaN (inputs may legitimately hold NaN)
        if kept is not None and not (torch.equal(x, kept) or torch.equal(x.nan_to_num(), kept.nan_to_num())):
            verdicts.insert(0, ("wrong", None, f"the kernel modified its input {i}"))  # the root cause first
    status, err, reason = min(verdicts, key=lambda v: ("nan", "wrong", "ok").index(v[0]))
    if status == "ok":
        err = max(v[1] for v in verdicts if v[1] is not None)
    return CheckResult(status, err, reason, inputs, out if with_out else None, with_out)
