"""The rope_cache kernel: rotary embedding of the new tokens' queries and keys, and their keys and values written into
a KV cache in place, in one launch. `evo` pastes this file (from the marker on) into every rendered module, after a
header naming the genome's values: what runs is this text.

The input is the merged projection's output qkv[T, (HQ + 2 HKV) * D], row-major: per token HQ query heads, HKV key
heads, then HKV value heads, each D wide. A program takes BLOCK_T tokens x BLOCK_H heads and walks each half of the
head dimension in BLOCK_D-wide steps (rotate-half convention of Llama, Qwen2, Mistral: element c of the first half
pairs with element c of the second):

    y[c]        = x[c] * cos[p, c]        - x[c + D/2] * sin[p, c]
    y[c + D/2]  = x[c + D/2] * cos[p, c + D/2] + x[c] * sin[p, c + D/2]      (p = start + t, computed in fp32)

Query heads go to q[h, t, :] (the [1, HQ, T, D] layout attention takes), key heads rotated and value heads as they
are to cache[0 or 1, 0, kv_head, p, :]. `start` is read from device memory, so one launch (and one CUDA graph) serves
every decode step. A position with no table row or no room in the cache writes nothing into the cache and NaN into
q: a caller's overflow shows instead of corrupting memory.

Structure switches (tl.constexpr): SPLIT_ROLES gives each program heads of one role only (query, key or value
blocks, the role decided once per program, values never touching the tables); otherwise the heads of one token
are one flat range that a program's block may straddle, the role decided per head. HALF_TABLE reads tables holding
D/2 columns (cos of each pair once) instead of D. EVICT_QKV is the eviction hint on the loads of qkv.
"""

import triton
import triton.language as tl


# ---- the rope_cache kernel (pasted verbatim into rendered modules from this line on) ------------------------------
@triton.jit
def rope_cache_kernel(qkv_ptr, cos_ptr, sin_ptr, cache_ptr, start_ptr, q_ptr,
                      n_tokens, n_positions, capacity,
                      stride_qkv, stride_cos, stride_sin, stride_kv, stride_head, stride_pos, stride_qh, stride_qt,
                      HQ: tl.constexpr, HKV: tl.constexpr, HEAD_D: tl.constexpr, HALF_PAD: tl.constexpr,
                      HALF_TABLE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr,
                      BLOCK_D: tl.constexpr, SPLIT_ROLES: tl.constexpr, EVICT_QKV: tl.constexpr):
    HALF: tl.constexpr = HEAD_D // 2
    Q_BLOCKS: tl.constexpr = (HQ + BLOCK_H - 1) // BLOCK_H
    KV_BLOCKS: tl.constexpr = (HKV + BLOCK_H - 1) // BLOCK_H

    # the program's tokens and their positions
    t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    pos = tl.load(start_ptr).to(tl.int32) + t
    tok_ok = t < n_tokens
    pos_ok = tok_ok & (pos >= 0) & (pos < n_positions) & (pos < capacity)

    # the program's heads, as indices into a token's row of HQ + 2 HKV heads
    pid_h = tl.program_id(1)
    if SPLIT_ROLES:  # one role per program: query blocks, then key blocks, then value blocks
        is_q = pid_h < Q_BLOCKS
        is_v = pid_h >= Q_BLOCKS + KV_BLOCKS
        block = tl.where(is_q, pid_h, tl.where(is_v, pid_h - Q_BLOCKS - KV_BLOCKS, pid_h - Q_BLOCKS))
        first = tl.where(is_q, 0, tl.where(is_v, HQ + HKV, HQ))
        local = block * BLOCK_H + tl.arange(0, BLOCK_H)
        head_ok = local < tl.where(is_q, HQ, HKV)
        heads = first + local
    else:  # a flat range over every head of the row
        heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
        head_ok = heads < HQ + 2 * HKV

    # [BLOCK_T, BLOCK_H, BLOCK_D] tiles: tokens x heads x columns of one half
    t3 = t[:, None, None]
    h3 = heads[None, :, None]
    row_ok = tok_ok[:, None, None] & head_ok[None, :, None]
    pos_ok3 = pos_ok[:, None, None]
    x_row = qkv_ptr + t3.to(tl.int64) * stride_qkv + h3 * HEAD_D
    # where a head goes: q[h, t], or cache[which, 0, kv_head, pos] with which 0 for keys, 1 for values
    q_row = q_ptr + h3 * stride_qh + t3.to(tl.int64) * stride_qt
    kv = tl.maximum(h3 - HQ, 0)
    which = kv // HKV
    p3 = pos[:, None, None].to(tl.int64)  # 64-bit: a long cache may hold more than 2**31 elements
    kv_head = (kv - which * HKV).to(tl.int64)
    kv_row = cache_ptr + which.to(tl.int64) * stride_kv + kv_head * stride_head + p3 * stride_pos
    cos_row = cos_ptr + p3 * stride_cos
    sin_row = sin_ptr + p3 * stride_sin

    for d0 in tl.static_range(0, HALF_PAD, BLOCK_D):
        c3 = (d0 + tl.arange(0, BLOCK_D))[None, None, :]
        mask = row_ok & (c3 < HALF)
        x1 = tl.load(x_row + c3, mask=mask, other=0.0, eviction_policy=EVICT_QKV).to(tl.float32)
        x2 = tl.load(x_row + HALF + c3, mask=mask, other=0.0, eviction_policy=EVICT_QKV).to(tl.float32)
        table_mask = pos_ok3 & (c3 < HALF)
        if SPLIT_ROLES:
            if is_v:  # values are written as they are: no table is read
                y1 = x1
                y2 = x2
            else:
                cos1 = tl.load(cos_row + c3, mask=table_mask, other=float("nan"))
                sin1 = tl.load(sin_row + c3, mask=table_mask, other=float("nan"))
                if HALF_TABLE:
                    cos2 = cos1
                    sin2 = sin1
                else:
                    cos2 = tl.load(cos_row + HALF + c3, mask=table_mask, other=float("nan"))
                    sin2 = tl.load(sin_row + HALF + c3, mask=table_mask, other=float("nan"))
                y1 = x1 * cos1 - x2 * sin1
                y2 = x2 * cos2 + x1 * sin2
            if is_q:
                tl.store(q_row + c3, y1.to(q_ptr.dtype.element_ty), mask=mask)
                tl.store(q_row + HALF + c3, y2.to(q_ptr.dtype.element_ty), mask=mask)
            else:
                tl.store(kv_row + c3, y1.to(cache_ptr.dtype.element_ty), mask=mask & pos_ok3)
                tl.store(kv_row + HALF + c3, y2.to(cache_ptr.dtype.element_ty), mask=mask & pos_ok3)
        else:
            cos1 = tl.load(cos_row + c3, mask=table_mask, other=float("nan"))
            sin1 = tl.load(sin_row + c3, mask=table_mask, other=float("nan"))
            if HALF_TABLE:
                cos2 = cos1
                sin2 = sin1
            else:
                cos2 = tl.load(cos_row + HALF + c3, mask=table_mask, other=float("nan"))
                sin2 = tl.load(sin_row + HALF + c3, mask=table_mask, other=float("nan"))
            rotate = h3 < HQ + HKV  # query and key heads; value heads pass through
            y1 = tl.where(rotate, x1 * cos1 - x2 * sin1, x1)
            y2 = tl.where(rotate, x2 * cos2 + x1 * sin2, x2)
            to_q = mask & (h3 < HQ)
            to_cache = mask & (h3 >= HQ) & pos_ok3
            tl.store(q_row + c3, y1.to(q_ptr.dtype.element_ty), mask=to_q)
            tl.store(q_row + HALF + c3, y2.to(q_ptr.dtype.element_ty), mask=to_q)
            tl.store(kv_row + c3, y1.to(cache_ptr.dtype.element_ty), mask=to_cache)
            tl.store(kv_row + HALF + c3, y2.to(cache_ptr.dtype.element_ty), mask=to_cache)
