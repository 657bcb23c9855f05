"""The speed-of-light floor: the larger of compute at the datasheet peak and bytes at the measured copy
bandwidth; no floor without a measured bandwidth (a smoke run)."""

from __future__ import annotations

import pytest

from evo.evaluate.roofline import floor, peak_tflops


class Op:
    """Just the two numbers a floor needs."""

    def __init__(self, flops: float, nbytes: float) -> None:
        self._flops, self._bytes = flops, nbytes

    def flops(self, problem):
        return self._flops

    def bytes(self, problem):
        return self._bytes


class Problem:
    dtype = "bf16"


def test_the_more_specific_gpu_name_wins():
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert peak_tflops("NVIDIA H200", "fp32") == 67.0
    assert peak_tflops("Some other GPU", "bf16") is None


def test_compute_bound_and_memory_bound_floors():
    # 989 TFLOP/s: 989e9 FLOPs take 1 ms; 2e9 bytes at 2,000 GB/s take 1 ms
    compute = floor(Op(989e9 * 4, 2e9), Problem(), "NVIDIA H200", 2000.0)
    assert compute.ms == pytest.approx(4.0) and compute.memory_ms == pytest.approx(1.0)
    memory = floor(Op(989e9, 2e9 * 3), Problem(), "NVIDIA H200", 2000.0)
    assert memory.ms == pytest.approx(3.0) and memory.compute_ms == pytest.approx(1.0)
    assert memory.share(6.0) == pytest.approx(0.5) and memory.share(0.0) is None


def test_no_measured_bandwidth_no_floor_and_unknown_gpus_are_memory_only():
    assert floor(Op(1e9, 1e9), Problem(), "NVIDIA H200", None) is None
    assert floor(Op(1e9, 1e9), Problem(), "NVIDIA H200", 0.0) is None
    unknown = floor(Op(1e15, 1e9), Problem(), "Some other GPU", 1000.0)
    assert unknown.compute_ms is None and unknown.ms == pytest.approx(1.0)


def test_the_peak_is_the_math_dtypes_where_an_operator_names_one():
    """An FP8 GEMM's output is bf16, its math e4m3: its floor is at the FP8 peak (twice bf16's on Hopper)."""
    import operators

    op = operators.get("fp8_gemm+channel")
    problem = op.problem((4096, 4096, 4096), "bf16")
    assert op.math_dtype(problem) == "fp8" and operators.get("gemm").math_dtype(problem) == "bf16"
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp8") == 1979.0 and peak_tflops("NVIDIA A100", "fp8") is None
    fp8 = floor(op, problem, "NVIDIA H100 80GB HBM3", 3000.0)
    assert fp8.peak_tflops == 1979.0 and fp8.compute_ms == pytest.approx(2 * 4096**3 / 1979e12 * 1e3)
    assert floor(Op(1, 1), Problem(), "NVIDIA H200", 2000.0).peak_tflops == 989.0  # no math_dtype: the problem's
