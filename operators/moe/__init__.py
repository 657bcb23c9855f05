"""`moe_gate_up` and `moe_down`: a Mixture-of-Experts MLP's expert GEMMs, tokens routed top-k to experts, weights in
Hugging Face's 3-D expert layout. kernel.py is the kernel, the routing and the launch plan (pasted into every rendered
module), operator.py binds them to the operator interface, baselines.py says what they are measured against."""

from operators.moe.operator import MoEDownOperator, MoEGateUpOperator

__all__ = ["MoEGateUpOperator", "MoEDownOperator"]
