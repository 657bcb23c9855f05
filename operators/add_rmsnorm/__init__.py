"""`rmsnorm+residual`: the residual add and RMSNorm in one kernel. kernel.py is the kernel and its launch plan (pasted
into every rendered module), operator.py binds it to the operator interface."""

from operators.add_rmsnorm.operator import AddRMSNormOperator, rmsnorm_variant

__all__ = ["AddRMSNormOperator", "rmsnorm_variant"]
