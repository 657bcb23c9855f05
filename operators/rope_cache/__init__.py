"""rope_cache: rotary embedding of the new tokens and their KV-cache write in one launch (see operator.py)."""

from operators.rope_cache.operator import RopeCacheOperator

__all__ = ["RopeCacheOperator"]
