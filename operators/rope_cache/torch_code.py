"""The torch side of rope_cache: seeded inputs, the fp32 reference and the code a user writes instead (the baseline).
A real module, imported by the operator and pasted verbatim (from the marker on) into an exported module's
self-check, so both run one text.

The user's code is DecoderLayer.attention's (evo/zoo/layer.py) with the position as a device tensor, as serving code
with a static cache writes it (Hugging Face's StaticCache): split the merged projection, reshape and transpose to
[1, heads, T, D], gather the tables' rows at start + arange(T), rotate in fp32 and cast back, and `index_copy_` the
keys and values into the cache at those positions (a slice `cache[..., start:start + T]` needs `start` on the host:
a device-to-host sync per step that no CUDA graph can capture).
"""

import math

import torch


# ---- rope_cache torch code (imports only torch and math; pasted verbatim into exported self-checks) ---------------
def rope_heads(qkv, cache):
    """(query heads, key/value heads, head dim) of a merged projection qkv[T, (HQ + 2 HKV) * D] and its cache
    [2, 1, HKV, capacity, D]."""
    hkv, d = cache.shape[2], cache.shape[4]
    return qkv.shape[1] // d - 2 * hkv, hkv, d


def rope_inputs(tokens, heads, kv_heads, head_dim, context, dtype, seed, device):
    """Seeded inputs (qkv, cos, sin, cache, start): qkv and the cache standard normal, tables of random angles in the
    rotate-half layout (each row's two halves equal, as cat(freqs, freqs) gives; rows independent, so a wrong row
    shows), room for the tokens after `context` cached ones, start = context as a one-element int32 tensor."""
    positions, capacity = context + tokens, context + tokens
    width = (heads + 2 * kv_heads) * head_dim
    cache_shape = (2, 1, kv_heads, capacity, head_dim)
    if torch.device(device).type == "meta":
        return (torch.empty(tokens, width, dtype=dtype, device=device),
                torch.empty(positions, head_dim, device=device), torch.empty(positions, head_dim, device=device),
                torch.empty(cache_shape, dtype=dtype, device=device), torch.empty(1, dtype=torch.int32, device=device))
    gen = torch.Generator(device=device).manual_seed(seed)
    qkv = torch.randn(tokens, width, generator=gen, device=device, dtype=dtype)
    cache = torch.randn(cache_shape, generator=gen, device=device, dtype=dtype)
    angles = torch.rand(positions, head_dim // 2, generator=gen, device=device) * (2 * math.pi)
    angles = torch.cat((angles, angles), dim=-1)
    start = torch.tensor([context], dtype=torch.int32, device=device)
    return qkv, angles.cos(), angles.sin(), cache, start


def _rotated(x, cos, sin):
    """x[..., T, D] (fp32) rotated in the rotate-half convention by cos, sin [T, D]."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _split(qkv, cos, sin, cache, start):
    """q, k, v as [1, heads, T, D] views, the positions, and the tables' rows at them ([T, D] even from half tables)."""
    t = qkv.shape[0]
    hq, hkv, d = rope_heads(qkv, cache)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q = q.reshape(t, hq, d).transpose(0, 1).unsqueeze(0)
    k = k.reshape(t, hkv, d).transpose(0, 1).unsqueeze(0)
    v = v.reshape(t, hkv, d).transpose(0, 1).unsqueeze(0)
    positions = start.long() + torch.arange(t, device=qkv.device)
    c, s = cos.index_select(0, positions), sin.index_select(0, positions)
    if c.shape[-1] != d:  # half tables: one column per pair
        c, s = torch.cat((c, c), dim=-1), torch.cat((s, s), dim=-1)
    return q, k, v, positions, c, s


def torch_rope_cache(qkv, cos, sin, cache, start):
    """What a user writes: q rotated [1, HQ, T, D]; k rotated and v written into the cache at start..start+T-1."""
    q, k, v, positions, c, s = _split(qkv, cos, sin, cache, start)
    q = _rotated(q.float(), c, s).to(qkv.dtype)
    k = _rotated(k.float(), c, s).to(qkv.dtype)
    cache[0].index_copy_(2, positions, k)
    cache[1].index_copy_(2, positions, v)
    return q


def rope_reference(qkv, cos, sin, cache, start):
    """The exact results in fp32, the cache untouched: (q [1, HQ, T, D], what the cache's positions start..start+T-1
    must hold afterwards [2, 1, HKV, T, D])."""
    q, k, v, _, c, s = _split(qkv, cos, sin, cache, start)
    return _rotated(q.float(), c, s), torch.stack((_rotated(k.float(), c, s), v.float()))


def rope_written(cache, start, tokens):
    """The part of the cache that a call for `tokens` tokens at `start` writes: a view [2, 1, HKV, T, D]."""
    first = int(start.reshape(-1)[0])
    return cache[:, :, :, first:first + tokens]


def rope_checked_reference(qkv, cos, sin, cache, start, tolerance):
    """The exported self-check's reference: q's exact value. Once something wrote the cache's new positions (the
    kernel, called before this; an export's self-check inputs hold NaN there until then), they are compared with
    theirs too, and a wrong write prints why and makes the reference NaN, so the check fails. (A kernel that writes
    nothing there is not caught by this; evo's own check, which judges the written positions, is.)"""
    q, kv = rope_reference(qkv, cos, sin, cache, start)
    got = rope_written(cache, start, qkv.shape[0]).float()
    if not bool(got.isnan().all()):
        err = ((got - kv).norm() / kv.norm()).item()
        if not err <= tolerance:
            print(f"FAIL: the keys and values written into the cache: relative error {err:.3g}")
            return q * float("nan")
    return q
