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

Gemma 2 passes its logit cap and its layer's window (`softcap`, `sliding_window`): an op runs only where its variant
computes exactly that (`attention+causal+softcap50` where the call caps at 50 and, the mask being None, the window
hides no key; `...+window4096` on the layers of that window; `cache_attention+softcap50` for a boolean mask of a call
that caps at 50, the window, where there is one, being in the mask), and every other call of a capped model runs the
family's own eager attention (SDPA cannot cap), its boolean mask made additive as eager's masks are.
"""

from __future__ import annotations

import sys
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
    cap = kwargs.get("softcap")
    plain = not dropout and not kwargs.get("output_attentions") and kwargs.get("position_bias") is None
    if plain and attention_mask is None and is_causal is not False and getattr(module, "is_causal", True):
        window = kwargs.get("sliding_window") or 0
        bound = pick(tuple(b for b in ops if not _cached(b.operator) and _fits(b.operator, cap or 0.0, window)), q_len,
                     query.dtype)
        if bound is not None:
            if 1 < q_len < kv_len:  # a prefill into an empty static cache: the keys after the prompt are empty slots
                key, value = key[:, :, :q_len], value[:, :, :q_len]
            out = bound.op(query, key, value, scaling)
            return out.transpose(1, 2).contiguous(), None
    if (plain and isinstance(attention_mask, torch.Tensor) and attention_mask.dtype == torch.bool
            and tuple(attention_mask.shape) == (query.shape[0], 1, q_len, kv_len)):
        # a decode step over a static cache: the mask says which slots hold keys (and a sliding layer's window)
        bound = pick(tuple(b for b in ops if _cached(b.operator) and model_switches(b.operator)[0] == (cap or 0.0)),
                     q_len, query.dtype)
        if bound is not None:
            return bound.op(query, key, value, attention_mask, scaling), None
    if cap is not None:
        return _eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


def model_switches(operator: str) -> tuple[float, int]:
    """The logit cap and window an attention operator's name carries (0: none): attention+causal+softcap50+window4096
    -> (50.0, 4096)."""
    cap, window = 0.0, 0
    for option in operator.split("+")[1:]:
        if option.startswith("softcap"):
            cap = float(option.removeprefix("softcap"))
        elif option.startswith("window"):
            window = int(option.removeprefix("window"))
    return cap, window


def _cached(operator: str) -> bool:
    """An op of cache_attention or one of its variants (`cache_attention+softcap50`): it takes the mask."""
    return operator.split("+")[0] == CACHED


def _fits(operator: str, cap: float, window: int) -> bool:
    """Whether an op of `operator` computes a call that caps at `cap` in a layer of window `window` (0: none) where
    transformers needs no mask (so the layer's window hides no key): the same cap, and no window or the layer's."""
    op_cap, op_window = model_switches(operator)
    return op_cap == cap and op_window in (0, window)


def _eager(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
           attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, Any]:
    """The family's own eager attention (it caps logits; SDPA cannot), with the additive mask it expects: the
    boolean mask of evo's mask interface made additive, or for None the mask it stands for in transformers' SDPA path
    (is_causal for more than one query: SDPA's top-left causal mask, which in a prefill into an empty static cache
    keeps the slots after the prompt out; every key for one query)."""
    eager = sys.modules[type(module).__module__].eager_attention_forward
    lowest = torch.finfo(query.dtype).min
    if attention_mask is None:
        q_len, kv_len = query.shape[2], key.shape[2]
        seen = torch.ones(q_len, kv_len, dtype=torch.bool, device=query.device).tril(0 if q_len > 1 else kv_len)
        attention_mask = seen[None, None]
    if attention_mask.dtype == torch.bool:
        zeros = torch.zeros(attention_mask.shape, dtype=query.dtype, device=query.device)
        attention_mask = zeros.masked_fill(~attention_mask, lowest)
    return eager(module, query, key, value, attention_mask, **kwargs)
