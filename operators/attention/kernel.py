"""Attention forward in Triton: O = softmax(Q K^T * scale) V per head, the online softmax of FlashAttention, and its
launch plan, as one real module. evo renders a module for a genome (genomes/attention.py, backend=triton) by
writing a header (the genome's constants as CONFIG and the entry function), pasting operators/attention/arguments.py
and then this file below the marker verbatim: the code a search measured and a user exports is this file.

A program owns BLOCK_M query rows of one head and walks the keys they see in BLOCK_N steps, keeping the fp32 output
tile, the running max and the running sum in registers. Scores are kept in base 2: the softmax scale is folded with
log2(e) into one factor (qk_scale) applied to each tile of Q K^T, and exponentials are exp2. Causal masks are
aligned to the bottom right, as a KV cache needs (query i of n_q sees keys up to i + n_k - n_q; the usual top-left
mask when n_q == n_k). Rows that no key of a block is visible to keep a finite running max, so no -inf - (-inf)
ever reaches exp2. Switches (constexpr), each a structure gene's:
- PACK_GQA: a tile's rows are (query, head) pairs of the GROUP query heads sharing one KV head, which then read K
  and V once (decode: one query row per head would fill 1 of 16 rows of a tile);
- SPLIT > 1: the keys a tile sees are split over SPLIT programs (flash-decoding), each writing its partial output
  and log-sum-exp; combined by the second launch `attention_combine`, or with LAST_PROGRAM by the last program of
  the tile to arrive (an atomic ticket; nothing waits, and the ticket is left at zero for the next launch);
- MASK_ALL: every key block masked, else the blocks that no row of the tile masks (left of the causal diagonal,
  inside the key length) run without the mask and only the rest with it;
- REVERSE and TILES_FIRST: the order programs take the work in (the longest causal rows first; a head's tiles
  together, sharing K and V in L2, or a tile's heads together);
- TMA: K and V through tensor descriptors made in the kernel (rows past n_k and the padded head dims arrive as
  zeros), else through pointers;
- PERSISTENT: a fixed grid whose programs loop over the (tile, head, split) work items in issue order;
and two of a model's (no gene; 0, off, in every CONFIG so far):
- SOFTCAP > 0: the logits soft-capped, cap * tanh(logits / cap) (Gemma 2); WINDOW > 0: a sliding window, the query
  at key position i sees only keys past i - WINDOW (Mistral, Gemma 2's local layers), the blocks left of a tile's
  windows skipped and those the window's edge crosses masked.
The head dimension is padded to D_PAD, a power of two: when HEAD_DIM differs, the tiles' last columns are masked.
"""

import math

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel
from operators.attention.arguments import check_arguments

# ---- evo pastes this file from here on into every module it renders for this family ----

LOG2E = 1.4426950408889634
COMBINE_ROWS = 16  # output rows per program of the combining launch


@triton.jit
def _key_block(acc, m_i, l_i, q, k_src, v_src, start, q_pos, dims, d_ok, qk_scale, skn, svn, n_q, n_k,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr, CAUSAL: tl.constexpr,
               MASKED: tl.constexpr, TMA: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    """One step of the key loop at `start`: the scores, the online max and sum, and the output tile's update. k_src
    and v_src are the head's tensor descriptors (TMA) or its first rows' pointers. Each mask is built before the
    address it guards: Triton emits a load's keywords before its arguments, and the order of the ops steers ptxas's
    register allocation."""
    cols = start + tl.arange(0, BLOCK_N)
    if TMA:  # rows past n_k and the padded head dims arrive as zeros: only the scores are masked
        k = k_src.load([start, 0])
        s = tl.dot(q, tl.trans(k)) * qk_scale
    else:
        if MASKED or HEAD_DIM != D_PAD:
            k_ok = (cols[None, :] < n_k) if MASKED else (cols[None, :] >= 0)
            if HEAD_DIM != D_PAD:
                k_ok = k_ok & d_ok[:, None]
            kt = tl.load(k_src + cols[None, :].to(tl.int64) * skn + dims[:, None], mask=k_ok, other=0.0)
        else:
            kt = tl.load(k_src + cols[None, :].to(tl.int64) * skn + dims[:, None])
        s = tl.dot(q, kt) * qk_scale
    if SOFTCAP > 0:  # cap * tanh(logits / cap), SOFTCAP the cap in base 2 (times log2 e): tanh(x) = 2 sigmoid(2x) - 1
        s = SOFTCAP * (2.0 * tl.sigmoid(s * (2.0 / SOFTCAP)) - 1.0)
    if MASKED:
        visible = cols[None, :] < n_k
        if CAUSAL:
            visible = visible & (cols[None, :] <= q_pos[:, None] + (n_k - n_q))
        if WINDOW > 0:  # the query at key position i sees only keys past i - WINDOW
            visible = visible & (cols[None, :] > q_pos[:, None] + (n_k - n_q) - WINDOW)
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with no key visible yet
    else:
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_use = m_new
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(s - m_use[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    if TMA:
        v = v_src.load([start, 0])
    else:
        if MASKED or HEAD_DIM != D_PAD:
            v_ok = (cols[:, None] < n_k) if MASKED else (cols[:, None] >= 0)
            if HEAD_DIM != D_PAD:
                v_ok = v_ok & d_ok[None, :]
            v = tl.load(v_src + cols[:, None].to(tl.int64) * svn + dims[None, :], mask=v_ok, other=0.0)
        else:
            v = tl.load(v_src + cols[:, None].to(tl.int64) * svn + dims[None, :])
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
    return acc, m_new, l_i


@triton.jit
def _combined(PO, PL, part_row, row_ok, n_part, dims, ROWS: tl.constexpr, D_PAD: tl.constexpr, SPLIT: tl.constexpr):
    """The SPLIT partial outputs of rows `part_row`, weighted by their log-sum-exp. .cg reads L2: this SM's L1 must
    not serve lines other programs wrote since."""
    m_c = tl.full([ROWS], float("-inf"), tl.float32)
    den = tl.zeros([ROWS], tl.float32)
    o = tl.zeros([ROWS, D_PAD], tl.float32)
    for i in tl.range(0, SPLIT):
        part = i * n_part + part_row
        lse = tl.load(PL + part, mask=row_ok, other=float("-inf"), cache_modifier=".cg")
        m_new = tl.maximum(m_c, lse)
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        a = tl.exp2(m_c - m_use)
        w = tl.exp2(lse - m_use)
        po = tl.load(PO + part[:, None] * D_PAD + dims[None, :], mask=row_ok[:, None], other=0.0, cache_modifier=".cg")
        o = o * a[:, None] + po * w[:, None]
        den = den * a + w
        m_c = m_new
    return o / tl.where(den > 0, den, 1.0)[:, None]


@triton.jit
def _store_o(Out, o, o_off, dims, d_ok, row_ok, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr):
    if HEAD_DIM != D_PAD:
        tl.store(Out + o_off[:, None] + dims[None, :], o.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        tl.store(Out + o_off[:, None] + dims[None, :], o.to(Out.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def _attend_tile(tile, bh, split, Q, K, V, Out, PO, PL, n_part, CNT, qk_scale, sqb, sqh, sqm, skb, skh, skn, svb, svh,
                 svn, sob, soh, som, n_q, n_k, n_tiles, h_grid, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                 D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
                 CAUSAL: tl.constexpr, PACK_GQA: tl.constexpr, LAST_PROGRAM: tl.constexpr, MASK_ALL: tl.constexpr,
                 REVERSE: tl.constexpr, TMA: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    """One work item: query tile `tile` of head `bh` (batch * h_grid + head, the KV head when packed) against its
    `split`-th share of the keys it sees."""
    if REVERSE:
        tile = n_tiles - 1 - tile  # the last query tiles (the longest causal rows) first
    b = bh // h_grid
    hg = bh % h_grid
    rows = tile * BLOCK_M + tl.arange(0, BLOCK_M)
    if PACK_GQA:
        q_pos = rows // GROUP  # a row is a (query, head) pair of the heads sharing KV head hg
        head = hg * GROUP + rows % GROUP
        kvh = hg
        row_ok = rows < n_q * GROUP
        q_lo = (tile * BLOCK_M) // GROUP
        q_hi = tl.minimum(((tile + 1) * BLOCK_M - 1) // GROUP, n_q - 1)
    else:
        q_pos = rows
        head = hg
        kvh = hg // GROUP
        row_ok = rows < n_q
        q_lo = tile * BLOCK_M
        q_hi = tl.minimum(q_lo + BLOCK_M - 1, n_q - 1)
    b64 = b.to(tl.int64)
    q_off = b64 * sqb + head.to(tl.int64) * sqh + q_pos.to(tl.int64) * sqm
    o_off = b64 * sob + head.to(tl.int64) * soh + q_pos.to(tl.int64) * som
    dims = tl.arange(0, D_PAD)
    d_ok = dims < HEAD_DIM  # the head dims that are real: masks only where HEAD_DIM != D_PAD
    if HEAD_DIM != D_PAD:
        q = tl.load(Q + q_off[:, None] + dims[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    else:
        q = tl.load(Q + q_off[:, None] + dims[None, :], mask=row_ok[:, None], other=0.0)
    k_src = K + b64 * skb + kvh.to(tl.int64) * skh
    v_src = V + b64 * svb + kvh.to(tl.int64) * svh
    if TMA:
        k_src = tl.make_tensor_descriptor(k_src, shape=[n_k, HEAD_DIM], strides=[skn, 1], block_shape=[BLOCK_N, D_PAD])
        v_src = tl.make_tensor_descriptor(v_src, shape=[n_k, HEAD_DIM], strides=[svn, 1], block_shape=[BLOCK_N, D_PAD])
    if CAUSAL:
        hi = tl.minimum(n_k, q_hi + 1 + n_k - n_q)  # keys the tile's last query sees
        full = tl.minimum(n_k // BLOCK_N, (q_lo + 1 + n_k - n_q) // BLOCK_N) * BLOCK_N  # seen by every row
    else:
        hi = n_k
        full = (n_k // BLOCK_N) * BLOCK_N
    lo = 0
    if WINDOW > 0:  # no row sees the keys left of the first row's window: from that key's block on
        lo = tl.maximum(q_lo + 1 + n_k - n_q - WINDOW, 0) // BLOCK_N * BLOCK_N
    if SPLIT > 1:
        per = tl.cdiv(tl.cdiv(hi - lo, BLOCK_N), SPLIT) * BLOCK_N  # keys per split, whole blocks
        lo = lo + split * per
        hi = tl.minimum(hi, lo + per)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], tl.float32)
    if MASK_ALL:
        for start in tl.range(lo, hi, BLOCK_N):
            acc, m_i, l_i = _key_block(acc, m_i, l_i, q, k_src, v_src, start, q_pos, dims, d_ok, qk_scale, skn, svn,
                                       n_q, n_k, BLOCK_N, HEAD_DIM, D_PAD, CAUSAL, True, TMA, SOFTCAP, WINDOW)
    else:  # the key blocks that no row of the tile masks, then the rest (the causal diagonal, the ragged end)
        if WINDOW > 0:  # first the blocks the window's left edge crosses, masked
            edge = tl.cdiv(tl.maximum(q_hi + 1 + n_k - n_q - WINDOW, 0), BLOCK_N) * BLOCK_N  # in every row's window
            for start in tl.range(lo, tl.minimum(edge, hi), BLOCK_N):
                acc, m_i, l_i = _key_block(acc, m_i, l_i, q, k_src, v_src, start, q_pos, dims, d_ok, qk_scale, skn,
                                           svn, n_q, n_k, BLOCK_N, HEAD_DIM, D_PAD, CAUSAL, True, TMA, SOFTCAP, WINDOW)
            lo = tl.maximum(lo, edge)
        for start in tl.range(lo, tl.minimum(full, hi), BLOCK_N):
            acc, m_i, l_i = _key_block(acc, m_i, l_i, q, k_src, v_src, start, q_pos, dims, d_ok, qk_scale, skn, svn,
                                       n_q, n_k, BLOCK_N, HEAD_DIM, D_PAD, CAUSAL, False, TMA, SOFTCAP, WINDOW)
        for start in tl.range(tl.maximum(lo, full), hi, BLOCK_N):
            acc, m_i, l_i = _key_block(acc, m_i, l_i, q, k_src, v_src, start, q_pos, dims, d_ok, qk_scale, skn, svn,
                                       n_q, n_k, BLOCK_N, HEAD_DIM, D_PAD, CAUSAL, True, TMA, SOFTCAP, WINDOW)
    if SPLIT == 1:
        _store_o(Out, acc / l_i[:, None], o_off, dims, d_ok, row_ok, HEAD_DIM, D_PAD)
    else:
        heads = h_grid * GROUP if PACK_GQA else h_grid  # query heads
        part_row = (b64 * heads + head) * n_q + q_pos
        l_safe = tl.where(l_i > 0, l_i, 1.0)  # a split whose keys no row sees
        lse = tl.where(l_i > 0, m_i + tl.log2(l_safe), float("-inf"))
        part = split * n_part + part_row
        tl.store(PL + part, lse, mask=row_ok)
        tl.store(PO + part[:, None] * D_PAD + dims[None, :], acc / l_safe[:, None], mask=row_ok[:, None])
        if LAST_PROGRAM:
            tl.debug_barrier()  # every thread's partial is written before the ticket is taken
            ticket = tl.atomic_add(CNT + bh * n_tiles + tile, 1)  # acq_rel: the others' partials are seen
            if ticket == SPLIT - 1:  # the tile's last program combines; nothing ever waits
                o = _combined(PO, PL, part_row, row_ok, n_part, dims, BLOCK_M, D_PAD, SPLIT)
                _store_o(Out, o, o_off, dims, d_ok, row_ok, HEAD_DIM, D_PAD)
                tl.atomic_xchg(CNT + bh * n_tiles + tile, 0)  # ready for the next call (CUDA graphs too)


@triton.jit
def attention_kernel(Q, K, V, Out, PO, PL, n_part, CNT, qk_scale, sqb, sqh, sqm, skb, skh, skn, svb, svh, svn, sob, soh,
                     som, n_q, n_k, n_tiles, h_grid, n_bh, GROUP: tl.constexpr, HEAD_DIM: tl.constexpr,
                     D_PAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr,
                     CAUSAL: tl.constexpr, PACK_GQA: tl.constexpr, LAST_PROGRAM: tl.constexpr,
                     MASK_ALL: tl.constexpr, REVERSE: tl.constexpr, TILES_FIRST: tl.constexpr, TMA: tl.constexpr,
                     PERSISTENT: tl.constexpr, SOFTCAP: tl.constexpr, WINDOW: tl.constexpr):
    """The work items (query tile, head, split): one per program, or with PERSISTENT each program's in turn. PO,
    PL and n_part (the split partials) are None without a split, CNT (the tiles' tickets) without LAST_PROGRAM: a
    None argument is a constexpr, so such a kernel's signature holds only what it reads."""
    if PERSISTENT:
        for item in tl.range(tl.program_id(0), n_tiles * n_bh * SPLIT, tl.num_programs(0)):
            if TILES_FIRST:
                tile = item % n_tiles
                bh = (item // n_tiles) % n_bh
            else:
                bh = item % n_bh
                tile = (item // n_bh) % n_tiles
            split = item // (n_tiles * n_bh)
            _attend_tile(tile, bh, split, Q, K, V, Out, PO, PL, n_part, CNT, qk_scale, sqb, sqh, sqm, skb, skh, skn,
                         svb, svh, svn, sob, soh, som, n_q, n_k, n_tiles, h_grid, GROUP, HEAD_DIM, D_PAD, BLOCK_M,
                         BLOCK_N, SPLIT, CAUSAL, PACK_GQA, LAST_PROGRAM, MASK_ALL, REVERSE, TMA, SOFTCAP, WINDOW)
    else:
        if TILES_FIRST:
            tile = tl.program_id(0)
            bh = tl.program_id(1)
        else:
            bh = tl.program_id(0)
            tile = tl.program_id(1)
        _attend_tile(tile, bh, tl.program_id(2), Q, K, V, Out, PO, PL, n_part, CNT, qk_scale, sqb, sqh, sqm, skb, skh,
                     skn, svb, svh, svn, sob, soh, som, n_q, n_k, n_tiles, h_grid, GROUP, HEAD_DIM, D_PAD, BLOCK_M,
                     BLOCK_N, SPLIT, CAUSAL, PACK_GQA, LAST_PROGRAM, MASK_ALL, REVERSE, TMA, SOFTCAP, WINDOW)


@triton.jit
def attention_combine(PO, PL, Out, n_part, n_q, n_heads, sob, soh, som, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                      SPLIT: tl.constexpr, ROWS: tl.constexpr):
    """The second launch of a key split without LAST_PROGRAM: each program combines ROWS rows' partials."""
    part_row = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_ok = part_row < n_part
    q_pos = part_row % n_q
    head = (part_row // n_q) % n_heads
    b = part_row // (n_q * n_heads)
    o_off = b * sob + head * soh + q_pos * som
    dims = tl.arange(0, D_PAD)
    d_ok = dims < HEAD_DIM  # the head dims that are real: masks only where HEAD_DIM != D_PAD
    o = _combined(PO, PL, part_row, row_ok, n_part, dims, ROWS, D_PAD, SPLIT)
    _store_o(Out, o, o_off, dims, d_ok, row_ok, HEAD_DIM, D_PAD)


def attention_plan(q, k, v, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: grid,
    partials, counters and the bound kernels. Returns run(q, k, v, out, scale) for every call of this signature.
    `config` holds the genome's constants (the rendered module's CONFIG). The partials belong to the plan: one
    stream at a time."""
    b, hq, hkv, n_q, n_k, d = check_arguments(q, k, v, out, config["CAUSAL"])
    block_m, split, pack, programs = config["BLOCK_M"], config["SPLIT"], config["PACK_GQA"], config["PROGRAMS"]
    group = hq // hkv
    h_grid = hkv if pack else hq
    n_tiles = triton.cdiv(n_q * group if pack else n_q, block_m)
    if programs:  # persistent: one axis, as many programs as the work or the GPU holds
        work, limit = n_tiles * b * h_grid * split, 1 << 31
        grid = (min(work, programs),)
    else:
        work, limit = b * h_grid if config["TILES_FIRST"] else n_tiles, 65535
        grid = (n_tiles, b * h_grid, split) if config["TILES_FIRST"] else (b * h_grid, n_tiles, split)
    if work >= limit:
        raise ValueError(f"{b} x {h_grid} heads or {n_tiles} query tiles exceed a grid axis ({limit})")
    d_pad = max(16, triton.next_power_of_2(d))
    kernel = BoundKernel(attention_kernel, grid, {"num_warps": config["NUM_WARPS"], "num_stages": config["NUM_STAGES"]},
                         scratch=config["TMA"])
    copies = [t.stride(-1) != 1 for t in (q, k, v)]  # the head dimension must be contiguous
    if config["TMA"]:  # a tensor descriptor's base and row stride must be 16-byte multiples: else K and V are copied
        for i, t in ((1, k), (2, v)):
            copies[i] = copies[i] or any(s % (16 // t.element_size()) for s in t.stride()[:3]) or t.data_ptr() % 16
        if d * q.element_size() % 16:
            raise ValueError(f"this kernel loads K and V through TMA, whose rows must be 16-byte multiples; "
                             f"head_dim {d} is not")
    n_part = b * hq * n_q
    # without a split the kernel reads none of these: each is passed as None (a constexpr)
    po = pl = parts = counters = combine = None
    if split > 1:
        po = torch.empty((split, n_part, d_pad), dtype=torch.float32, device=q.device)
        pl = torch.empty((split, n_part), dtype=torch.float32, device=q.device)
        parts = n_part
        if config["LAST_PROGRAM"]:
            counters = torch.zeros(b * h_grid * n_tiles, dtype=torch.int32, device=q.device)
        else:
            combine = BoundKernel(attention_combine, (triton.cdiv(n_part, COMBINE_ROWS),), {"num_warps": 4})
    consts = (group, d, d_pad, block_m, config["BLOCK_N"], split, config["CAUSAL"], pack, config["LAST_PROGRAM"],
              config["MASK_ALL"], config["REVERSE"], config["TILES_FIRST"], config["TMA"], bool(programs),
              config["SOFTCAP"] * LOG2E, config["WINDOW"])

    def run(q, k, v, out, scale):
        if copies[0] or copies[1] or copies[2]:
            q, k, v = (t.contiguous() if c else t for t, c in zip((q, k, v), copies, strict=True))
        if out is None:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        qk_scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E
        kernel(q, k, v, out, po, pl, parts, counters, qk_scale, q.stride(0), q.stride(1), q.stride(2), k.stride(0),
               k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1),
               out.stride(2), n_q, n_k, n_tiles, h_grid, b * h_grid, *consts)
        if combine is not None:
            combine(po, pl, out, n_part, n_q, hq, out.stride(0), out.stride(1), out.stride(2), d, d_pad, split,
                    COMBINE_ROWS)
        return out

    run.kernel = kernel  # for inspection
    return run
