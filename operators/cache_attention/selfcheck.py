"""The plain-torch code around cache_attention, as a real module: the exact reference, transformers' SDPA path (the
baseline) and the inputs of a problem. operator.py uses it; `evo export` pastes it (from the marker on) below a header
of the problem's constants as the exported module's self-check (see `Operator.selfcheck_source`). The constants here
only make the file importable on its own."""

import torch

SELFCHECK_SIZES = (1, 8, 2, 1, 64, 32)  # (batch, heads, kv_heads, q_len, kv_len, head_dim)
SELFCHECK_DTYPE = torch.float16
SELFCHECK_FILLED = 0.75  # of the cache written before the queries
SELFCHECK_TOLERANCE = 2e-3
SELFCHECK_SOFTCAP = 0.0  # the scores capped, cap * tanh(s / cap) (0: none; `cache_attention+softcap<cap>`)

# ---- evo pastes this file from here on into every module it renders for this family ----


def cache_inputs(sizes, dtype, filled, device, seed):
    """q, k, v standard normal; the bool mask lets query t see keys 0 .. f + t, f = `filled` of the cache less the
    queries: a decode step's view of a static cache."""
    b, h, hk, tq, length, dim = sizes
    gen = torch.Generator(device=device).manual_seed(int(seed))
    shapes = [(b, h, tq, dim), (b, hk, length, dim), (b, hk, length, dim)]
    q, k, v = (torch.randn(s, generator=gen, device=device, dtype=torch.float32).to(dtype) for s in shapes)
    visible = max(int(filled * length) - tq, 0) + torch.arange(tq, device=device) + 1  # keys query t sees
    mask = (torch.arange(length, device=device)[None, :] < visible[:, None]).expand(b, 1, tq, length)
    return q, k, v, mask.contiguous()


def selfcheck_inputs(device):
    return cache_inputs(SELFCHECK_SIZES, SELFCHECK_DTYPE, SELFCHECK_FILLED, device, 20240917)


def selfcheck_reference(q, k, v, mask, scale=None, softcap=None):
    """The exact result in fp32, [B, Tq, H, D]; rows with no key allowed are zeros. `softcap`: the logit cap (None:
    SELFCHECK_SOFTCAP)."""
    cap = SELFCHECK_SOFTCAP if softcap is None else softcap
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    s = torch.matmul(qf, kf.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if cap:
        s = cap * torch.tanh(s / cap)
    p = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
    return torch.matmul(p, vf).transpose(1, 2).contiguous()


def selfcheck_baseline(q, k, v, mask, scale=None, softcap=None):
    """transformers' SDPA path with a mask: K and V repeated per query head, SDPA, then [B, Tq, H, D]. With a logit
    cap (`softcap`, None: SELFCHECK_SOFTCAP), which SDPA cannot apply, its Gemma-2 eager path: the scores scaled and
    capped, the mask made additive, softmax in fp32 cast back, then P V."""
    cap = SELFCHECK_SOFTCAP if softcap is None else softcap
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    if cap:
        s = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        s = torch.tanh(s / cap) * cap
        s = s + torch.zeros(mask.shape, dtype=s.dtype, device=s.device).masked_fill(~mask, torch.finfo(s.dtype).min)
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(p, v).transpose(1, 2).contiguous()
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    return o.transpose(1, 2).contiguous()


def problem_sizes(q, k, v, mask, scale=None):
    return (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3])
