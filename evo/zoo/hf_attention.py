"""The zoo's attention op inside transformers' attention interface: `evo` is registered as an attention
implementation (with SDPA's masks), and a patched model is switched to it.

The zoo's `attention+causal` op takes q, k, v and no mask: queries aligned to the bottom right of the keys. It runs
where transformers itself decided that the pattern needs no mask (`attention_mask is None`: a prefill, a decode step
over a dynamic cache, a prefill into an empty static cache, whose keys beyond the prompt are sliced off as
transformers' SDPA path does), for a module the patch bound an op to and a query length the zoo measured. Every other
call runs transformers' SDPA function unchanged: a mask (padding, a sliding window in reach, and every decode step
over a static cache, whose keys are the whole fixed-size cache), dropout, soft-capping, attention weights asked for.

A boolean mask [B, 1, Tq, L] (transformers' SDPA masks: every decode step over a static cache, padding, a sliding
window) goes to the zoo's `cache_attention` op where the patch bound one for that query length: it reads the cache in
place, K and V once per KV head, and skips the blocks the mask hides; other masks run SDPA.
"""

from __future__ import annotations

from typing import Any

import torch

from evo.zoo.hf_roles import pick

__all__ = ["NAME", "register", "evo_attention"]

NAME = "evo"  # the attn_implementation name a patched model runs under
CACHED = "cache_attention"  # the operator that takes a mask


def register() -> None:
    """Register `evo` with transformers' attention and mask interfaces (idempotent; its masks are SDPA's)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, evo_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def evo_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                  is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-interface signature: q [B, H, Lq, D], k and v [B, Hkv, Lk, D] -> ([B, Lq, H, D],
    None). The zoo's op where it is exact (see the module docstring), else `sdpa_attention_forward`."""
    q_len, kv_len = query.shape[2], key.shape[2]
    ops = getattr(module, "_evo_attention", ())
    plain = not dropout and kwargs.get("softcap") is None and not kwargs.get("output_attentions") \
        and kwargs.get("position_bias") is None
    if plain and attention_mask is None and is_causal is not False and getattr(module, "is_causal", True):
        bound = pick(tuple(b for b in ops if b.operator != CACHED), q_len, query.dtype)
        if bound is not None:
            if 1 < q_len < kv_len:  # a prefill into an empty static cache: the keys after the prompt are empty slots
                key, value = key[:, :, :q_len], value[:, :, :q_len]
            out = bound.op(query, key, value, scaling)
            return out.transpose(1, 2).contiguous(), None
    if (plain and isinstance(attention_mask, torch.Tensor) and attention_mask.dtype == torch.bool
            and tuple(attention_mask.shape) == (query.shape[0], 1, q_len, kv_len)):
        bound = pick(tuple(b for b in ops if b.operator == CACHED), q_len, query.dtype)
        if bound is not None:  # a decode step over a static cache: the mask says which slots hold keys
            return bound.op(query, key, value, attention_mask, scaling), None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)
