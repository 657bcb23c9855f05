"""The cache-attention kernel and its launch plan, as one real module: evo renders a module for a genome by writing a
header (the genome's constants, the entry) above this file's text from the marker on (operators/_paste.py).

A decode step's attention over a KV cache of fixed capacity, the keys a query may see given by a boolean mask
(True: attend), as transformers passes one with a static cache: q [B, H, Tq, D], k and v [B, Hkv, L, D] read in
place (any strides), mask [B, 1, Tq, L] (one for every head, as transformers makes it). One program takes one KV
head and a slice of the L keys (SPLITS slices): its rows are the GROUP = H / Hkv query heads of that KV head times
the Tq queries, padded to 16 for tl.dot, so K and V are read once per KV head (no copies of them per query head). A
block of keys none of whose mask entries is set is not read (SKIP_MASKED): the free slots of the cache cost one mask
load. A program keeps the running maximum, sum and weighted values of its slice (online softmax); with SPLITS > 1 each
writes them to its slot of a workspace, and the last program of a KV head to arrive (an arrival counter, reset by that
program for the next launch, so a CUDA graph replays it) combines the slots in split order: deterministic. The
output is [B, Tq, H, D], contiguous: what transformers' attention interface returns. A query row no key is allowed
for gets zeros. SOFTCAP > 0 caps the scores before the mask, cap * tanh(scores / cap) (Gemma 2's
attn_logit_softcapping: `cache_attention+softcap50`); a sliding window is the mask's to say.
"""

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel

# ---- evo pastes this file from here on into every module it renders for this family ----


@triton.jit
def _slice(q, k_ptr, v_ptr, mask_ptr, t, row_ok, d, d_ok, lo, hi, sk_l, sk_d, sv_l, sv_d, sm_t, sm_l, scale,
           ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, SKIP_MASKED: tl.constexpr,
           NUM_STAGES: tl.constexpr, SOFTCAP: tl.constexpr):
    """Online softmax over keys lo..hi of one KV head: (running max, running sum, weighted values) of every row."""
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    acc = tl.zeros([ROWS, BLOCK_D], dtype=tl.float32)
    for start in tl.range(lo, hi, BLOCK_N, num_stages=NUM_STAGES):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < hi
        allowed = tl.load(mask_ptr + t[:, None] * sm_t + cols[None, :] * sm_l,
                          mask=row_ok[:, None] & col_ok[None, :], other=0) != 0
        if SKIP_MASKED:
            visible = tl.max(allowed.to(tl.int32), axis=None) > 0
        else:
            visible = True
        if visible:
            k = tl.load(k_ptr + cols[:, None] * sk_l + d[None, :] * sk_d, mask=col_ok[:, None] & d_ok[None, :],
                        other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            if SOFTCAP > 0:  # cap * tanh(s / cap), as tanh(x) = 2 sigmoid(2x) - 1
                s = SOFTCAP * (2.0 * tl.sigmoid(s * (2.0 / SOFTCAP)) - 1.0)
            s = tl.where(allowed, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: no NaN from -inf - -inf
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(s - m_safe[:, None])
            v = tl.load(v_ptr + cols[:, None] * sv_l + d[None, :] * sv_d, mask=col_ok[:, None] & d_ok[None, :],
                        other=0.0)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
    return m_i, l_i, acc


@triton.jit
def cache_attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, o_ptr, ws_ptr, ml_ptr, count_ptr,
                           sq_b, sq_h, sq_t, sq_d, sk_b, sk_h, sk_l, sk_d, sv_b, sv_h, sv_l, sv_d,
                           sm_b, sm_t, sm_l, L, chunk, scale,
                           H_KV: tl.constexpr, GROUP: tl.constexpr, TQ: tl.constexpr, D: tl.constexpr,
                           BLOCK_D: tl.constexpr, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
                           SKIP_MASKED: tl.constexpr, NUM_STAGES: tl.constexpr, SOFTCAP: tl.constexpr):
    pid = tl.program_id(0)  # b * H_KV + KV head
    split = tl.program_id(1)
    b = pid // H_KV
    kv = pid % H_KV
    rows = tl.arange(0, ROWS)  # row r: query head kv * GROUP + r // TQ, query r % TQ
    row_ok = rows < GROUP * TQ
    head = kv * GROUP + rows // TQ
    t = rows % TQ
    d = tl.arange(0, BLOCK_D)
    d_ok = d < D
    q = tl.load(q_ptr + b * sq_b + head[:, None] * sq_h + t[:, None] * sq_t + d[None, :] * sq_d,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    lo = split * chunk
    hi = tl.minimum(lo + chunk, L)
    m_i, l_i, acc = _slice(q, k_ptr + b * sk_b + kv * sk_h, v_ptr + b * sv_b + kv * sv_h, mask_ptr + b * sm_b, t,
                           row_ok, d, d_ok, lo, hi, sk_l, sk_d, sv_l, sv_d, sm_t, sm_l, scale, ROWS, BLOCK_N, BLOCK_D,
                           SKIP_MASKED, NUM_STAGES, SOFTCAP)
    out_rows = (b * TQ + t) * (H_KV * GROUP) + head  # o[b, t, head, :]
    if SPLITS == 1:
        o = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        tl.store(o_ptr + out_rows[:, None] * D + d[None, :], o.to(o_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & d_ok[None, :])
    else:
        slot = pid * SPLITS + split
        tl.store(ws_ptr + (slot * ROWS + rows)[:, None] * BLOCK_D + d[None, :], acc)
        tl.store(ml_ptr + (slot * 2) * ROWS + rows, m_i)
        tl.store(ml_ptr + (slot * 2 + 1) * ROWS + rows, l_i)
        arrived = tl.atomic_add(count_ptr + pid, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLITS - 1:  # the last of this KV head's programs: combine the slots in split order
            first = pid * SPLITS
            m_all = tl.load(ml_ptr + (first * 2) * ROWS + rows, cache_modifier=".cg")
            for s in range(1, SPLITS):
                m_all = tl.maximum(m_all, tl.load(ml_ptr + ((first + s) * 2) * ROWS + rows, cache_modifier=".cg"))
            m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)
            total = tl.zeros([ROWS], dtype=tl.float32)
            o = tl.zeros([ROWS, BLOCK_D], dtype=tl.float32)
            for s in range(0, SPLITS):
                w = tl.exp(tl.load(ml_ptr + ((first + s) * 2) * ROWS + rows, cache_modifier=".cg") - m_safe)
                total += w * tl.load(ml_ptr + ((first + s) * 2 + 1) * ROWS + rows, cache_modifier=".cg")
                o += w[:, None] * tl.load(ws_ptr + ((first + s) * ROWS + rows)[:, None] * BLOCK_D + d[None, :],
                                          cache_modifier=".cg")
            o = o / tl.where(total == 0.0, 1.0, total)[:, None]
            tl.store(o_ptr + out_rows[:, None] * D + d[None, :], o.to(o_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & d_ok[None, :])
            tl.atomic_xchg(count_ptr + pid, 0, sem="relaxed", scope="gpu")  # counted from zero by the next launch


def _described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def cache_attention_plan(q, k, v, mask, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid, workspace and the bound kernel. Returns run(q, k, v, mask, out, scale) for every call of this signature.
    `config` holds the genome's constants (the rendered module's CONFIG). The workspace belongs to the plan: one
    stream at a time."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q must be [B, H, Tq, D]; got {_described(q)}")
    batch, heads, tq, dim = q.shape
    for name, t in (("k", k), ("v", v)):
        if (not isinstance(t, torch.Tensor) or t.dim() != 4 or t.shape[0] != batch or t.shape[3] != dim
                or t.dtype != q.dtype or t.device != q.device):
            raise ValueError(f"{name} must be [B={batch}, Hkv, L, D={dim}] in q's dtype and device; got "
                             f"{_described(t)}")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have one shape; got {tuple(k.shape)} and {tuple(v.shape)}")
    kv_heads, length = k.shape[1], k.shape[2]
    if kv_heads == 0 or heads % kv_heads:
        raise ValueError(f"q's {heads} heads must be a multiple of k's {kv_heads} KV heads")
    if (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.dim() != 4
            or tuple(mask.shape) != (batch, 1, tq, length) or mask.device != q.device):
        raise ValueError(f"mask must be a bool tensor [B={batch}, 1, Tq={tq}, L={length}] on {q.device} (True: "
                         f"attend); got {_described(mask)}")
    if out is not None and (not isinstance(out, torch.Tensor) or tuple(out.shape) != (batch, tq, heads, dim)
                            or out.dtype != q.dtype or out.device != q.device or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous tensor [B, Tq, H, D] = {(batch, tq, heads, dim)} in q's dtype")
    group = heads // kv_heads
    rows = max(16, triton.next_power_of_2(group * tq))
    block_d = max(16, triton.next_power_of_2(dim))
    block_n, splits = config["BLOCK_N"], config["SPLITS"]
    chunk = triton.cdiv(triton.cdiv(max(length, 1), splits), block_n) * block_n  # keys per split, whole blocks
    programs = batch * kv_heads
    # Never a tensor of the call kept here: a plan that held one would keep an activation alive (under CUDA-graph
    # trees, inside the graph's pool that no output tracks). Without a split, each call's q stands in for them.
    workspace = stats = counters = None
    if splits > 1:
        workspace = torch.empty(programs * splits * rows * block_d, dtype=torch.float32, device=q.device)
        stats = torch.empty(programs * splits * 2 * rows, dtype=torch.float32, device=q.device)
        counters = torch.zeros(programs, dtype=torch.int32, device=q.device)
    kernel = BoundKernel(cache_attention_kernel, (programs, splits),
                         {"num_warps": config["NUM_WARPS"], "num_stages": 1})
    consts = (kv_heads, group, tq, dim, block_d, rows, block_n, splits, config["SKIP_MASKED"], config["NUM_STAGES"],
              config["SOFTCAP"])
    shape = (batch, tq, heads, dim)

    def run(q, k, v, mask, out, scale):
        o = torch.empty(shape, dtype=q.dtype, device=q.device) if out is None else out
        if batch and heads and tq and length:
            kernel(q, k, v, mask, o, q if workspace is None else workspace, q if stats is None else stats,
                   q if counters is None else counters, *q.stride(), *k.stride(), *v.stride(), mask.stride(0),
                   mask.stride(2), mask.stride(3), length, chunk, float(dim ** -0.5 if scale is None else scale),
                   *consts)
        elif tq and heads:
            o.zero_()
        return o

    run.kernel = kernel  # for inspection
    run.workspace = (workspace, stats, counters) if splits > 1 else None
    return run
