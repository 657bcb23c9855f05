"""The rope_cache launcher: argument checks, the launch plan per argument signature, and the entry function. A real
module, pasted verbatim (from the marker on) into every rendered module after the launch runtime and the kernel;
the module's last line makes its entry from the genome's values named in its header:

    rope_cache = rope_cache_entry(BLOCK_T, BLOCK_H, BLOCK_D, SPLIT_ROLES, EVICT_QKV, NUM_WARPS)

The plan reads `rope_cache_kernel` from the module's globals when it is made (evo's ahead-of-time compiler swaps it
for a recorder), and binds it once per signature: a call then costs a look-up, q's allocation and one launch.
"""

import torch
import triton

from evo.launch.runtime import BoundKernel, PlanCache, signature
from operators.rope_cache.kernel import rope_cache_kernel


# ---- the rope_cache launcher (pasted verbatim into rendered modules from this line on) -----------------------------
def _described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def _rope_plan(qkv, cos, sin, cache, start, out, genome):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: head
    counts, strides, grid and the bound kernel. Returns run(qkv, cos, sin, cache, start, out)."""
    block_t, block_h, block_d, split_roles, evict, num_warps = genome
    if not isinstance(cache, torch.Tensor) or cache.dim() != 5 or cache.shape[0] != 2 or cache.shape[1] != 1:
        raise ValueError(f"cache must be a [2, 1, kv_heads, capacity, head_dim] tensor (keys, values); "
                         f"got {_described(cache)}")
    hkv, capacity, d = cache.shape[2], cache.shape[3], cache.shape[4]
    if d % 2 or d == 0 or hkv == 0:
        raise ValueError(f"cache's head_dim must be even and its kv_heads positive; got {_described(cache)}")
    if not isinstance(qkv, torch.Tensor) or qkv.dim() != 2 or qkv.dtype != cache.dtype or qkv.device != cache.device:
        raise ValueError(f"qkv must be a 2-d [tokens, (heads + 2 kv_heads) * head_dim] tensor of the cache's dtype "
                         f"({cache.dtype}) on {cache.device}; got {_described(qkv)}")
    t, width = qkv.shape
    hq = width // d - 2 * hkv
    if width % d or hq < 1 or qkv.stride(1) != 1:
        raise ValueError(f"qkv's rows must hold (heads + 2 x {hkv}) heads of {d} contiguous elements "
                         f"(the cache's kv_heads and head_dim); got {_described(qkv)} with strides {qkv.stride()}")
    for name, table in (("cos", cos), ("sin", sin)):
        if not isinstance(table, torch.Tensor) or table.dim() != 2 or table.shape[1] not in (d, d // 2) \
                or table.dtype != torch.float32 or table.device != cache.device or table.stride(1) != 1:
            raise ValueError(f"{name} must be a float32 [positions, {d}] or [positions, {d // 2}] table with "
                             f"contiguous rows on {cache.device}; got {_described(table)}")
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have one shape; got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if not isinstance(start, torch.Tensor) or start.numel() != 1 or start.dtype not in (torch.int32, torch.int64) \
            or start.device != cache.device:
        raise ValueError(f"start must be a one-element int32 or int64 tensor on {cache.device} (the first new "
                         f"token's position); got {_described(start)}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != (1, hq, t, d)
                            or out.dtype != qkv.dtype or out.device != qkv.device or out.stride(3) != 1):
        raise ValueError(f"out must be a [1, {hq}, {t}, {d}] tensor of qkv's dtype and device with contiguous rows; "
                         f"got {_described(out)}")
    half_pad = triton.next_power_of_2(d // 2)
    block_d = min(block_d, half_pad)
    blocks = triton.cdiv(hq, block_h) + 2 * triton.cdiv(hkv, block_h) if split_roles \
        else triton.cdiv(hq + 2 * hkv, block_h)
    kernel = BoundKernel(rope_cache_kernel, (triton.cdiv(t, block_t), blocks), {"num_warps": num_warps})
    fixed = (t, cos.shape[0], capacity, qkv.stride(0), cos.stride(0), sin.stride(0), cache.stride(0),
             cache.stride(2), cache.stride(3))
    consts = (hq, hkv, d, half_pad, cos.shape[1] != d, block_t, block_h, block_d, split_roles, evict)

    def run(qkv, cos, sin, cache, start, out):
        if out is None:
            out = torch.empty((1, hq, t, d), dtype=qkv.dtype, device=qkv.device)
        if t:
            kernel(qkv, cos, sin, cache, start, out, *fixed, out.stride(1), out.stride(2), *consts)
        return out

    run.kernel = kernel  # for inspection
    return run


def rope_cache_entry(block_t, block_h, block_d, split_roles, evict_qkv, num_warps):
    """The entry function of one genome's kernel (plans kept per argument signature)."""
    genome = (block_t, block_h, block_d, bool(split_roles), evict_qkv, num_warps)
    plans = PlanCache()

    def rope_cache(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: torch.Tensor, start: torch.Tensor,
                   out: torch.Tensor | None = None) -> torch.Tensor:
        """Rotary embedding of the new tokens and their KV-cache write, in one launch.

        qkv [T, (HQ + 2 HKV) * D]: the merged projection's output (query, key, value heads per row); cos, sin
        [positions, D] or [positions, D / 2] float32 tables (rotate-half convention); cache [2, 1, HKV, capacity, D]
        of qkv's dtype, written IN PLACE at positions start..start+T-1 (keys rotated, values as they are); start a
        one-element int32/int64 tensor on the device. Returns q rotated, [1, HQ, T, D] (into `out` if given). A
        position past the tables or the cache writes nothing into the cache and NaN into q."""
        key = (signature(qkv), signature(cos), signature(sin), signature(cache), signature(start),
               None if out is None else signature(out))
        run = plans.get(key)
        if run is None:
            run = plans.add(key, _rope_plan(qkv, cos, sin, cache, start, out, genome))
        return run(qkv, cos, sin, cache, start, out)

    return rope_cache
