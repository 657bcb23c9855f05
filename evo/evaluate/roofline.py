"""The speed of light of a problem on a GPU: its FLOPs at the GPU's dense peak, its bytes at the copy bandwidth.

The copy bandwidth is measured (a device-to-device copy, bytes read plus written) when a GPU worker starts; the
dense tensor-core peak is NVIDIA's datasheet figure for the GPU model (no sparsity). The floor of a problem is
the larger of the two times: no kernel can beat it, so `median / floor` says how far a kernel is from the
hardware's limit and `floor / median` is the share of the speed of light it reaches. A CPU smoke run has no
floor: its fitness is not a timing, and nothing here invents one for it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evo.problem import Problem

__all__ = ["Floor", "floor", "peak_tflops", "copy_bandwidth"]

# Dense tensor-core peaks from NVIDIA's datasheets (TFLOP/s, no sparsity). fp32 is plain fp32 (PyTorch does
# not use tf32 for fp32 matmuls by default); fp8 is the e4m3/e5m2 math of an operator whose math_dtype says so.
_PEAKS = (("H100 PCIe", {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0, "fp8": 1513.0}),
          ("H100", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0, "fp8": 1979.0}),
          ("H200", {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0, "fp8": 1979.0}),
          ("A100", {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5}))


def peak_tflops(gpu: str, dtype: str) -> float | None:
    for name, peaks in _PEAKS:
        if name.lower() in gpu.lower():
            return peaks.get(dtype)
    return None


def copy_bandwidth(device: str = "cuda", nbytes: int = 1 << 30, timer: Callable[..., list[Any]] | None = None
                   ) -> float:
    """GB/s of a device-to-device copy of `nbytes`, counting bytes read plus bytes written."""
    import torch

    from evo.evaluate.timing import time_interleaved

    src = torch.randn(nbytes // 4, device=device)
    dst = torch.empty_like(src)
    t = (timer or time_interleaved)([lambda: dst.copy_(src)], reps=30, warmup=3, budget_ms=2000.0)[0]
    return 2 * (nbytes // 4) * 4 / (t.median_ms * 1e-3) / 1e9


@dataclass(frozen=True)
class Floor:
    ms: float  # the larger of compute_ms and memory_ms
    compute_ms: float | None  # FLOPs at the dense peak (None: no peak known for this GPU and dtype)
    memory_ms: float  # bytes at the measured copy bandwidth
    peak_tflops: float | None
    copy_GBps: float

    def share(self, median_ms: float | None) -> float | None:
        """The share of the speed of light a kernel of `median_ms` reaches (1.0: at the floor)."""
        return self.ms / median_ms if median_ms and median_ms > 0 else None


def floor(operator: Any, problem: Problem, gpu: str, copy_GBps: float | None) -> Floor | None:
    """The floor of `problem` on `gpu`, or None without a measured copy bandwidth (no GPU, e.g. a smoke run)."""
    if not copy_GBps or copy_GBps <= 0:
        return None
    memory_ms = float(operator.bytes(problem)) / (copy_GBps * 1e9) * 1e3
    # the math's dtype, where an operator names one narrower than its output's (an FP8 GEMM's e4m3 operands)
    math_dtype = operator.math_dtype(problem) if hasattr(operator, "math_dtype") else problem.dtype
    peak = peak_tflops(gpu, math_dtype)
    compute_ms = float(operator.flops(problem)) / (peak * 1e12) * 1e3 if peak else None
    return Floor(max(memory_ms, compute_ms or 0.0), compute_ms, memory_ms, peak, float(copy_GBps))
