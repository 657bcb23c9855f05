"""The attention operators (`attention`, `attention+causal`): operator.py binds the genome
(genomes/attention.py) to the operator interface; module.py renders a module around the kernels of source.py."""

from operators.attention.operator import AttentionOperator, attention_variant, causal_pairs

__all__ = ["AttentionOperator", "attention_variant", "causal_pairs"]
