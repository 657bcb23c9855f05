"""The contenders of attention with a model's logit soft-capping or sliding window (`attention+causal+softcap50`,
`attention+causal+window4096`, Gemma 2's), which SDPA cannot soft-cap:
- `eager`: the attention transformers' Gemma-2 runs (modeling_gemma2's eager path): K and V repeated per query head,
  the scores scaled and capped, an additive mask, softmax in fp32 cast back to the inputs' dtype, then P V;
- `torch_compile`: torch.compile of that same function;
- `flex_attention`: torch's FlexAttention, the cap a score_mod and the mask a block mask, compiled;
- `sdpa` (a window without a cap only): SDPA with the window as a boolean mask.
Each is set up once per problem (its mask built then, as a model builds its mask once per forward); one that cannot
run here raises with its reason, which `evo bench` reports as unavailable.
"""

from __future__ import annotations

import math
from typing import Any

from evo.problem import Problem
from operators.base import Baseline

__all__ = ["model_baselines", "visible_keys", "eager_attention"]


def visible_keys(n_q: int, n_k: int, causal: bool, window: int, device: Any = "cpu") -> Any:
    """[n_q, n_k] booleans: the keys each query sees, the query i at key position i + n_k - n_q (bottom-right),
    causal up to it, and with a window only the `window` keys ending there."""
    import torch

    pos = torch.arange(n_q, device=device)[:, None] + (n_k - n_q)
    keys = torch.arange(n_k, device=device)[None, :]
    seen = torch.ones(n_q, n_k, dtype=torch.bool, device=device)
    if causal:
        seen &= keys <= pos
    if window:
        seen &= keys > pos - window
    return seen


def eager_attention(q: Any, k: Any, v: Any, scale: float, softcap: float, mask: Any) -> Any:
    """Gemma 2's eager attention: `mask` additive ([n_q, n_k], 0 or the dtype's lowest value) or None."""
    import torch

    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = torch.matmul(q, k.transpose(2, 3)) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    if mask is not None:
        s = s + mask
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(p, v)


def _per_device(build: Any) -> Any:
    """build(key), made once per key (the inputs' device, and dtype where it matters): a mask is set up once, as a
    model's forward does."""
    made: dict[Any, Any] = {}

    def get(device: Any) -> Any:
        if device not in made:
            made[device] = build(device)
        return made[device]

    return get


def _additive_mask(problem: Problem, causal: bool, window: int, where: tuple[Any, Any]) -> Any:
    """The mask Gemma 2's eager path adds to the scores: 0 where a key is seen, the dtype's lowest value elsewhere."""
    import torch

    d = problem.dims
    if not causal and not window:
        return None
    device, dtype = where
    seen = visible_keys(d["q_len"], d["kv_len"], causal, window, device)
    return torch.zeros(seen.shape, dtype=dtype, device=device).masked_fill(~seen, torch.finfo(dtype).min)


def _eager(causal: bool, softcap: float, window: int, compiled: bool) -> Any:
    def make(problem: Problem) -> Any:
        import torch

        mask = _per_device(lambda where: _additive_mask(problem, causal, window, where))
        fn = eager_attention
        if compiled:
            fn = torch.compile(eager_attention, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)
        scale_default = 1.0 / math.sqrt(problem.dims["head_dim"])

        def call(q: Any, k: Any, v: Any, scale: float | None = None) -> Any:
            return fn(q, k, v, scale_default if scale is None else scale, softcap, mask((q.device, q.dtype)))

        return call

    return make


def _flex(causal: bool, softcap: float, window: int) -> Any:
    def make(problem: Problem) -> Any:
        import torch

        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            raise RuntimeError(f"torch {torch.__version__} has no FlexAttention ({e})") from None
        d = problem.dims
        shift = d["kv_len"] - d["q_len"]

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            seen = kv_idx >= 0
            if causal:
                seen = seen & (kv_idx <= q_idx + shift)
            if window:
                seen = seen & (kv_idx > q_idx + shift - window)
            return seen

        def score_mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return softcap * torch.tanh(score / softcap)

        block_mask = _per_device(lambda device: create_block_mask(mask_mod, None, None, d["q_len"], d["kv_len"],
                                                                  device=device) if causal or window else None)
        fn = torch.compile(flex_attention, dynamic=False)
        gqa = d["heads"] != d["kv_heads"]

        def call(q: Any, k: Any, v: Any, scale: float | None = None) -> Any:
            return fn(q, k, v, score_mod=score_mod if softcap else None, block_mask=block_mask(q.device), scale=scale,
                      enable_gqa=gqa)

        return call

    return make


def _sdpa_window(causal: bool, window: int) -> Any:
    def make(problem: Problem) -> Any:
        import torch.nn.functional as F

        d = problem.dims
        seen = _per_device(lambda device: visible_keys(d["q_len"], d["kv_len"], causal, window, device))
        gqa = {"enable_gqa": True} if d["heads"] != d["kv_heads"] else {}

        def call(q: Any, k: Any, v: Any, scale: float | None = None) -> Any:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=seen(q.device), scale=scale, **gqa)

        return call

    return make


def model_baselines(causal: bool, softcap: float, window: int) -> list[Baseline]:
    """The contenders of a variant with a cap or a window, the primary first: transformers' eager path where there
    is a cap (SDPA cannot apply one), SDPA with a boolean mask where there is only a window."""
    what = " and ".join(([f"logits capped at {softcap:g}"] if softcap else [])
                        + ([f"a {window}-key sliding window"] if window else []))
    eager = [Baseline("eager", _eager(causal, softcap, window, False),
                      f"transformers' Gemma-2 eager attention ({what}): repeat_kv, matmul, tanh cap, additive mask, "
                      "fp32 softmax"),
             Baseline("torch_compile", _eager(causal, softcap, window, True),
                      "torch.compile(mode='max-autotune-no-cudagraphs') of that eager function"),
             Baseline("flex_attention", _flex(causal, softcap, window),
                      f"torch.compile of FlexAttention ({what}: score_mod and block mask)")]
    if softcap:
        return eager
    return [Baseline("sdpa", _sdpa_window(causal, window),
                     f"torch.nn.functional.scaled_dot_product_attention with the {window}-key window as a boolean "
                     "mask")] + eager
