"""The attention operators (`attention`, `attention+causal`): operator.py binds the genome (genomes/attention.py) to
the operator interface; module.py renders a module: a header (the genome's constants, the entry) above arguments.py
and the backend's kernel, kernel.py (Triton) or gluon_kernel.py (Gluon), pasted verbatim; an exported module's
self-check is selfcheck.py, pasted below the problem's constants."""

from operators.attention.operator import AttentionOperator, attention_variant, causal_pairs

__all__ = ["AttentionOperator", "attention_variant", "causal_pairs"]
