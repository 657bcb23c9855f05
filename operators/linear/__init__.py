"""`linear`: the decode GEMM on nn.Linear's [N, K] weights, with split-K reduced in the kernel, and its fused variants
(`linear+residual`, `linear+swiglu`, `linear+geglu`, `linear+rmsnorm`, `linear+rmsnorm+swiglu`, ...). kernel.py is
the kernel and its launch plan (pasted into every rendered module), operator.py binds it to the operator interface,
baselines.py says what it is measured against."""

from operators.linear.operator import LinearOperator, linear_variant

__all__ = ["LinearOperator", "linear_variant"]
