"""`fp8_gemm`: the GEMM of FP8 checkpoints, e4m3 operands with per-tensor, per-channel (`fp8_gemm+channel`) or
DeepSeek-V3 block scales (`fp8_gemm+block`), fp32 accumulation, bf16 or fp16 out. kernel.py is the kernel and its
launch plan (pasted into every rendered module), operator.py binds it to the operator interface, baselines.py says
what it is measured against (torch._scaled_mm, the eager dequantize-then-matmul), quantize.py makes its inputs."""

from operators.fp8_gemm.operator import FP8GemmOperator, fp8_gemm_variant

__all__ = ["FP8GemmOperator", "fp8_gemm_variant"]
