"""The plain-torch self-check `evo export` appends to an exported attention kernel, every variant of it (see
`Operator.selfcheck_source` for the names it must define), as a real module: the operator writes the problem's
constants (its sizes, dtype, mask, a model's logit cap and sliding window) and pastes the text below the marker
verbatim. The reference is the formula in fp32; the baseline is the operator's primary one (operators/attention/
operator.py's `baselines`): SDPA as a user calls it, or, where the logits are capped (SDPA cannot cap), the eager
attention transformers' Gemma 2 runs (model_baselines.py's `eager_attention`).
tests/operators/attention/test_selfcheck.py checks both against the operator's for every variant. The constants here
only make the file importable on its own (tests)."""

import math

import torch

SELFCHECK_SIZES = (1, 4, 2, 3, 9, 16)  # (batch, heads, kv_heads, q_len, kv_len, head_dim)
SELFCHECK_DTYPE = torch.float16
SELFCHECK_CAUSAL = False  # a bottom-right causal mask: query i sits at key position i + kv_len - q_len
SELFCHECK_SOFTCAP = 0.0  # the logits capped, cap * tanh(s / cap) (0: none)
SELFCHECK_WINDOW = 0  # a query sees only the WINDOW keys ending at its own (0: every key the mask leaves)
SELFCHECK_TOLERANCE = 4e-3  # largest accepted ||o - ref|| / ||ref||

# ---- evo pastes this file from here on into every module it renders for this family ----


def selfcheck_inputs(device):
    """Fresh standard-normal q[B, Hq, Lq, D], k and v[B, Hkv, Lk, D] (never zeros), seeded."""
    b, hq, hkv, n_q, n_k, d = SELFCHECK_SIZES
    gen = torch.Generator(device=device).manual_seed(20240611)
    shapes = ((b, hq, n_q, d), (b, hkv, n_k, d), (b, hkv, n_k, d))
    return tuple(torch.randn(s, generator=gen, device=device, dtype=SELFCHECK_DTYPE) for s in shapes)


def _selfcheck_seen(q, k):
    """[Lq, Lk] booleans: the keys each query sees (all of them without a mask)."""
    n_q, n_k = q.shape[2], k.shape[2]
    pos = torch.arange(n_q, device=q.device)[:, None] + (n_k - n_q)
    keys = torch.arange(n_k, device=q.device)[None, :]
    seen = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device)
    if SELFCHECK_CAUSAL:
        seen &= keys <= pos
    if SELFCHECK_WINDOW:
        seen &= keys > pos - SELFCHECK_WINDOW
    return seen


def selfcheck_reference(q, k, v):
    """The exact result in fp32: k and v repeated for each query head they serve, the scores scaled by
    1/sqrt(head_dim) and capped, the hidden keys at -inf, softmax, then P V."""
    group = q.shape[1] // k.shape[1]
    q, k, v = q.float(), k.float().repeat_interleave(group, dim=1), v.float().repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if SELFCHECK_SOFTCAP:
        s = SELFCHECK_SOFTCAP * torch.tanh(s / SELFCHECK_SOFTCAP)
    s = s.masked_fill(~_selfcheck_seen(q, k), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def _selfcheck_eager(q, k, v, scale):
    """transformers' Gemma-2 eager attention: K and V repeated per query head, the scores scaled and capped, an
    additive mask (0, or the dtype's lowest value), softmax in fp32 cast back to the inputs' dtype, then P V."""
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = torch.matmul(q, k.transpose(2, 3)) * scale
    if SELFCHECK_SOFTCAP:
        s = torch.tanh(s / SELFCHECK_SOFTCAP) * SELFCHECK_SOFTCAP
    if SELFCHECK_CAUSAL or SELFCHECK_WINDOW:
        hidden = ~_selfcheck_seen(q, k)
        s = s + torch.zeros(hidden.shape, dtype=q.dtype, device=q.device).masked_fill(hidden, torch.finfo(q.dtype).min)
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(p, v)


def _selfcheck_sdpa(q, k, v, scale):
    """SDPA as a user calls it: the causal mask as is_causal where the lengths agree, else bottom-right; a window as a
    boolean mask; GQA enabled where query heads share a KV head."""
    n_q, n_k = q.shape[2], k.shape[2]
    mask = {}
    if SELFCHECK_WINDOW:
        mask = {"attn_mask": _selfcheck_seen(q, k)}
    elif SELFCHECK_CAUSAL and n_q == n_k:
        mask = {"is_causal": True}
    elif SELFCHECK_CAUSAL:
        from torch.nn.attention.bias import causal_lower_right

        mask = {"attn_mask": causal_lower_right(n_q, n_k)}
    gqa = {"enable_gqa": True} if q.shape[1] != k.shape[1] else {}
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **mask, **gqa, scale=scale)


def selfcheck_baseline(q, k, v, scale=None):  # scale: as the entry takes it (a zoo's fallback)
    """What the kernel was timed against: the eager attention where the logits are capped (SDPA cannot cap), else
    SDPA. `scale` defaults to 1/sqrt(head_dim)."""
    if SELFCHECK_SOFTCAP:
        return _selfcheck_eager(q, k, v, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    return _selfcheck_sdpa(q, k, v, scale)


def problem_sizes(q, k, v):
    """(batch, heads, kv_heads, q_len, kv_len, head_dim)."""
    return (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3])
