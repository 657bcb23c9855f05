"""`cache_attention`: a decode step's attention over a KV cache with a mask (transformers' static cache), K and V read
once per KV head. kernel.py is the kernel and its launch plan (pasted into every rendered module), operator.py binds it
to the operator interface and says what it is measured against."""

from operators.cache_attention.operator import CacheAttentionOperator, cache_attention_variant

__all__ = ["CacheAttentionOperator", "cache_attention_variant"]
