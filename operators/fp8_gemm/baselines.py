"""What the FP8 GEMM is measured against, and its exact reference: one description (`FP8Math`) of a scale mode gives
the reference (dequantized in fp64), the eager dequantize-then-matmul a user writes (the scales applied in the output
dtype, then torch.matmul: cuBLAS), torch.compile of that, and torch._scaled_mm (cuBLASLt's FP8 GEMM) with the scales
in the layout it takes for the mode. A contender that cannot run a problem here raises `ContenderUnavailable` with
why (the bench records it as skipped); torch._scaled_mm is checked once per problem, on the device, against the
reference, so a layout it reads otherwise than meant is refused, not timed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evo.problem import DTYPES, Problem
from operators.base import Baseline
from operators.fp8_gemm.quantize import dequantize

__all__ = ["FP8Math", "ContenderUnavailable", "fp8_baselines", "fp8_contenders", "GROUPINGS"]

# scale mode -> (grouping of a's scales, grouping of W's): operators/fp8_gemm/quantize.py
GROUPINGS = {"tensor": ("tensor", "tensor"), "channel": ("row", "row"), "block": ("group", "block")}
PROBE_TOLERANCE = 2e-2  # torch._scaled_mm against the reference, in any output dtype: a wrong layout is far off


class ContenderUnavailable(RuntimeError):
    """A contender that cannot run in this environment; the message says why."""


@dataclass(frozen=True)
class FP8Math:
    scales: str  # "tensor", "channel" or "block"

    @property
    def text(self) -> str:
        return {"tensor": "y = (a @ W^T) * a_scale * w_scale",
                "channel": "y[m, n] = (a @ W^T)[m, n] * a_scale[m] * w_scale[n]",
                "block": "y = sum over 128-wide groups g of (a_g @ W_g^T) * a_scale[:, g] * w_scale[n // 128, g]"}[
            self.scales]

    def _dequantized(self, inputs: tuple[Any, ...], dtype: Any) -> tuple[Any, Any]:
        a, w, a_scale, w_scale = inputs[:4]
        grouping_a, grouping_w = GROUPINGS[self.scales]
        a2 = a.reshape(-1, a.shape[-1])
        if grouping_a == "row" and a_scale.numel() == 1:
            grouping_a = "tensor"  # one scale for all rows
        return dequantize(a2, a_scale, grouping_a, dtype), dequantize(w, w_scale, grouping_w, dtype)

    def reference(self, *inputs: Any) -> Any:
        """The exact result in fp32 (dequantized and multiplied in fp64), y[..., N] for a[..., K]."""
        import torch

        a, w = inputs[:2]
        if a.device.type == "meta":
            return torch.empty((*a.shape[:-1], w.shape[0]), dtype=torch.float32, device=a.device)
        a_d, w_d = self._dequantized(inputs, torch.float64)
        return (a_d @ w_d.t()).float().reshape(*a.shape[:-1], w.shape[0])

    def eager(self, out_dtype: Any) -> Callable[..., Any]:
        """The dequantize-then-matmul a user writes: each operand cast to the output dtype and scaled in it (the
        block scales repeated over their groups), then torch.matmul."""
        import torch

        def dequant_matmul(a: Any, w: Any, a_scale: Any, w_scale: Any) -> Any:
            a_d, w_d = self._dequantized((a, w, a_scale, w_scale), out_dtype)
            return torch.matmul(a_d, w_d.t()).reshape(*a.shape[:-1], w.shape[0])

        return dequant_matmul

    def scaled_mm(self, out_dtype: Any, layout: int = 0) -> Callable[..., Any]:
        """torch._scaled_mm on a [M, K] and W^T (a view: W's rows are K-major, as cuBLASLt's FP8 GEMM takes B), the
        scales as the mode gives them to it: one element each (tensor), a_scale [M, 1] and w_scale [1, N]
        (row-wise; one activation scale expanded to every row), or a_scale [M, K/128] and w_scale^T [K/128,
        N/128] (block-wise 1x128 and 128x128; `layout` 1 gives a_scale column-major, as cuBLASLt reads it: the copy
        made once per scale tensor and kept, as a quantizer writing for cuBLASLt would write it so)."""
        import torch

        kept: dict[str, Any] = {}

        def column_major(t: Any) -> Any:
            key = (t.data_ptr(), t._version, tuple(t.shape))
            if kept.get("key") != key:
                kept["key"], kept["value"] = key, t.t().contiguous().t()
            return kept["value"]

        def scaled_mm(a: Any, w: Any, a_scale: Any, w_scale: Any) -> Any:
            a2 = a.reshape(-1, a.shape[-1])
            m, n = a2.shape[0], w.shape[0]
            if self.scales == "tensor":
                sa, sw = a_scale.reshape(()), w_scale.reshape(())
            elif self.scales == "channel":
                sa, sw = a_scale.reshape(-1, 1).expand(m, 1).contiguous(), w_scale.reshape(1, n)
            else:
                sa = a_scale.reshape(m, -1)
                sa = column_major(sa) if layout == 1 else sa
                sw = w_scale.t()
            y = torch._scaled_mm(a2, w.t(), scale_a=sa, scale_b=sw, out_dtype=out_dtype)
            return y.reshape(*a.shape[:-1], n)

        return scaled_mm


def fp8_baselines(math: FP8Math, make_inputs: Callable[[Problem, int, str], tuple[Any, ...]]) -> list[Baseline]:
    """The primary baseline: the fastest torch way this torch has for the problem, torch._scaled_mm where it runs the
    scale mode and output dtype, else the eager dequantize-then-matmul."""
    return [Baseline("torch_fp8", lambda problem: _fastest(math, problem, make_inputs),
                     "torch._scaled_mm where this torch and GPU run the problem's scale mode and output dtype "
                     "(checked once against the reference), else dequantize-then-matmul in eager PyTorch")]


def fp8_contenders(math: FP8Math, make_inputs: Callable[[Problem, int, str], tuple[Any, ...]]) -> list[Baseline]:
    """Each torch way on its own: torch._scaled_mm (with its reason where it cannot run), the eager
    dequantize-then-matmul, and torch.compile of that."""
    return [
        Baseline("scaled_mm", lambda problem: _scaled(math, problem, make_inputs),
                 "torch._scaled_mm (cuBLASLt FP8 GEMM) with the mode's scales"),
        Baseline("dequant_matmul", lambda problem: math.eager(_dtype(problem)),
                 "PyTorch eager: a and W cast to the output dtype and scaled, then torch.matmul (cuBLAS)"),
        Baseline("torch_compile", lambda problem: _compiled(math, problem),
                 "torch.compile (default mode) of the dequantize-then-matmul"),
    ]


def _dtype(problem: Problem) -> Any:
    import torch

    return getattr(torch, DTYPES[problem.dtype])


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _scaled(math: FP8Math, problem: Problem, make_inputs: Callable[[Problem, int, str], tuple[Any, ...]]) -> Any:
    """torch._scaled_mm for the problem after one call on the problem's own inputs, checked against the reference;
    ContenderUnavailable with torch's reason (the first line of its error) where no layout runs right."""
    import torch

    if not hasattr(torch, "_scaled_mm"):
        raise ContenderUnavailable(f"torch {torch.__version__} has no torch._scaled_mm")
    device = _device()
    inputs = make_inputs(problem, 0, device)
    ref = math.reference(*inputs)
    reasons = []
    for layout in ((0, 1) if math.scales == "block" else (0,)):
        fn = math.scaled_mm(_dtype(problem), layout)
        try:
            got = fn(*inputs).float()
        except (RuntimeError, NotImplementedError, ValueError) as e:
            text = str(e).strip()
            reasons.append(text.splitlines()[0] if text else type(e).__name__)
            continue
        err = ((got - ref).norm() / ref.norm().clamp(min=1e-30)).item()
        if err <= PROBE_TOLERANCE:
            return fn
        reasons.append(f"it ran but disagreed with the reference (relative error {err:.3g})")
    raise ContenderUnavailable(f"torch._scaled_mm cannot run {math.scales} scales with {problem.dtype} output on "
                               f"{device} here (torch {torch.__version__}): {'; '.join(dict.fromkeys(reasons))}")


def _fastest(math: FP8Math, problem: Problem, make_inputs: Callable[[Problem, int, str], tuple[Any, ...]]) -> Any:
    try:
        return _scaled(math, problem, make_inputs)
    except ContenderUnavailable:
        return math.eager(_dtype(problem))


def _compiled(math: FP8Math, problem: Problem) -> Any:
    import torch

    torch._dynamo.reset()  # a fresh cache per problem
    return torch.compile(math.eager(_dtype(problem)))
