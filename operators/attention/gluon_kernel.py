"""Attention forward in Gluon for sm_90 (genomes/attention_gluon.py, backend=gluon): FlashAttention-3's roles as warp
groups of their own, one program per (query tile, batch and head), and its launch plan, as one real module. evo
renders a module for a genome by writing a header (the genome's constants as CONFIG and the entry function),
pasting operators/attention/arguments.py and then this file below the marker verbatim.

- The producer, one warp with a small register budget, loads each consumer's query tile once, then streams the
  key blocks the tile sees through a ring of NUM_STAGES slots: it waits for a slot's `empty` mbarrier (every
  consumer has finished with the slot) and fills its K and its V tile by TMA, each arriving on a `ready`
  mbarrier of its own, so the scores can start before V has landed.
- Each consumer (CONSUMERS of them, NUM_WARPS warps each, BLOCK_M query rows each) issues S = Q K^T as an
  asynchronous wgmma from shared memory, runs the online softmax in base 2 on the accumulator's registers, and
  issues O += P V with P taken from registers (converted to the wgmma operand layout, never stored). With
  OVERLAP, block j's scores are issued before block j - 1's P V and its softmax runs while that product is in
  flight (FlashAttention-3's intra-warp-group overlap); the output is rescaled once the product has retired.
  With PINGPONG (two consumers, overlap) the consumers take turns issuing their two products through a pair of
  mbarriers, so that one's softmax runs while the other's products occupy the tensor cores (FlashAttention-3's
  inter-warp-group ping-pong).
- Contiguous q, k and v are read through 2-d descriptors over [batch x heads x length, head_dim]: a tile that
  runs past its head's keys reads the next head's rows (or zeros past the tensor), whose scores are masked to
  -inf, so they add nothing. Other strides (a transposed [B, L, H, D] view, a slice of a KV cache) are read in
  place through 4-d descriptors (STRIDED), whose rows past a head's end arrive as zeros. The output leaves from
  registers through masked stores (its tile may run past the head's rows).
Every index into the ring follows from the key block's number, the same in the producer and the consumers, so
the mbarrier phases need no other shared state. The mask is applied only to the key blocks that need it (the
last block past the keys, and with a causal mask the blocks the diagonal crosses).
"""

import math

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from evo.launch.runtime import BoundKernel
from operators.attention.arguments import check_arguments, described

# ---- evo pastes this file from here on into every module it renders for this family ----

# the TMA load as Triton 3.9 names it, or as 3.6 (the older name is gone from 3.9)
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared

LOG2E = 1.4426950408889634
_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}

@gluon.jit
def work_item(tile, bh, n_q, n_k, n_tiles, hq, group, ROWS: gl.constexpr, BLOCK_N: gl.constexpr,
              CAUSAL: gl.constexpr, REVERSE: gl.constexpr):
    """Work item (query tile `tile` of ROWS rows, batch and head `bh`): the tile in issue order, the first row of
    its queries and of its KV head's keys in the flattened tensors, and the number of key blocks its rows see."""
    if REVERSE:  # the last tiles (with a causal mask, the longest rows) first
        tile = n_tiles - 1 - tile
    q_row = bh * n_q + tile * ROWS
    kv_row = (bh // hq * (hq // group) + bh % hq // group) * n_k
    hi = n_k
    if CAUSAL:  # bottom-right: query i sees keys up to i + n_k - n_q
        hi = gl.minimum(n_k, (tile + 1) * ROWS + n_k - n_q)
    return tile, q_row, kv_row, gl.cdiv(hi, BLOCK_N)


@gluon.jit
def produce(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty, tile, bh,
            step, item, n_q, n_k, n_tiles, hq, group, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
            NUM_STAGES: gl.constexpr, CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr,
            STRIDED: gl.constexpr, PERSISTENT: gl.constexpr):
    """One work item's loads: the consumers' query tiles, then every key block the tile sees into the ring, from
    the program's `step`-th slot on (its `item`-th item). Returns the step after its last block."""
    tile, q_row, kv_row, n_blocks = work_item(tile, bh, n_q, n_k, n_tiles, hq, group, BLOCK_M * CONSUMERS,
                                              BLOCK_N, CAUSAL, REVERSE)
    b = bh // hq
    h = bh % hq
    for c in gl.static_range(CONSUMERS):
        if PERSISTENT:  # the consumer is done with its previous query tile (a fresh barrier passes the first round)
            mbarrier.wait(q_empty.index(c), (item & 1) ^ 1)
        mbarrier.expect(q_ready.index(c), q_desc.block_type.nbytes)
        if STRIDED:  # 4-d descriptors over the tensors as given: [batch, head, row, 0]
            tma_load(q_desc, [b, h, (tile * CONSUMERS + c) * BLOCK_M, 0], q_ready.index(c), q_bufs.index(c))
        else:
            tma_load(q_desc, [q_row + c * BLOCK_M, 0], q_ready.index(c), q_bufs.index(c))
    for j in range(n_blocks):
        slot = (step + j) % NUM_STAGES
        # wait until every consumer is done with the slot's last blocks (a fresh barrier passes the first round)
        mbarrier.wait(empty.index(slot), (((step + j) // NUM_STAGES) & 1) ^ 1)
        mbarrier.expect(k_ready.index(slot), k_desc.block_type.nbytes)
        mbarrier.expect(v_ready.index(slot), v_desc.block_type.nbytes)
        if STRIDED:
            tma_load(k_desc, [b, h // group, j * BLOCK_N, 0], k_ready.index(slot), k_bufs.index(slot))
            tma_load(v_desc, [b, h // group, j * BLOCK_N, 0], v_ready.index(slot), v_bufs.index(slot))
        else:
            tma_load(k_desc, [kv_row + j * BLOCK_N, 0], k_ready.index(slot), k_bufs.index(slot))
            tma_load(v_desc, [kv_row + j * BLOCK_N, 0], v_ready.index(slot), v_bufs.index(slot))
    return step + n_blocks


@gluon.jit
def load_partition(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty, n_q,
                   n_k, n_tiles, hq, group, bhs, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                   NUM_STAGES: gl.constexpr, CONSUMERS: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr,
                   STRIDED: gl.constexpr, PERSISTENT: gl.constexpr):
    """The producer: this program's work item, or with a persistent grid every one of its items in turn."""
    if PERSISTENT:  # items in issue order (a tile's heads together), dealt out to the programs in turn
        step = 0
        item = 0
        for w in range(gl.program_id(0), n_tiles * bhs, gl.num_programs(0)):
            step = produce(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready,
                           empty, w // bhs, w % bhs, step, item, n_q, n_k, n_tiles, hq, group, BLOCK_M, BLOCK_N,
                           NUM_STAGES, CONSUMERS, CAUSAL, REVERSE, STRIDED, PERSISTENT)
            item += 1
    else:
        produce(q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                gl.program_id(0), gl.program_id(1), 0, 0, n_q, n_k, n_tiles, hq, group, BLOCK_M, BLOCK_N, NUM_STAGES,
                CONSUMERS, CAUSAL, REVERSE, STRIDED, PERSISTENT)


@gluon.jit
def tile_of(bufs, i, ROWS: gl.constexpr, HEAD_D: gl.constexpr, STRIDED: gl.constexpr):
    """Slot i of a ring as the [ROWS, HEAD_D] tile a wgmma reads (a 4-d TMA block's leading ones dropped)."""
    view = bufs.index(i)
    if STRIDED:
        view = view.reshape([ROWS, HEAD_D])
    return view


@gluon.jit
def scores(q_smem, k_bufs, k_ready, j, zero, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
           STRIDED: gl.constexpr):
    """Issue S = Q K^T for the key block in the program's `j`-th ring step (asynchronous wgmma, both operands in
    shared memory)."""
    slot = j % NUM_STAGES
    mbarrier.wait(k_ready.index(slot), (j // NUM_STAGES) & 1)
    k_tile = tile_of(k_bufs, slot, BLOCK_N, HEAD_D, STRIDED)
    return warpgroup_mma(q_smem, k_tile.permute((1, 0)), zero, use_acc=False, is_async=True)


@gluon.jit
def masked(s, j, rows, n_k, n_q, clear_to, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, s_layout: gl.constexpr):
    """Scores of key block j with the keys past n_k (and, causal, right of the diagonal) at -inf; blocks wholly
    left of `clear_to` are returned as they are."""
    if (j + 1) * BLOCK_N > clear_to:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        seen = gl.expand_dims(cols < n_k, 0) & gl.expand_dims(rows >= 0, 1)
        if CAUSAL:
            seen = seen & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + (n_k - n_q), 1))
        s = gl.where(seen, s, float("-inf"))
    return s


@gluon.jit
def online_softmax(s, m_i, l_i):
    """One key block's step of the online softmax in base 2: the block's probabilities against the new running
    max, the running max and sum, and the factor that rescales what was summed before."""
    m_new = gl.maximum(m_i, gl.max(s, axis=1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s - gl.expand_dims(m_new, 1))
    return p, m_new, l_i * alpha + gl.sum(p, axis=1), alpha


@gluon.jit
def attend(out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty, turns, qk_scale,
           tile, bh, step, turn, item, n_q, n_k, n_tiles, hq, group, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
           HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
           WARPS: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr, OVERLAP: gl.constexpr,
           PINGPONG: gl.constexpr, STRIDED: gl.constexpr, PERSISTENT: gl.constexpr):
    """One work item of a consumer: its BLOCK_M query rows of the tile against every key block they see, by
    asynchronous wgmma, from the program's `step`-th ring slot and `turn`-th ping-pong turn on (its `item`-th
    item). Returns the step and the turn after the item."""
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                       instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                       instr_shape=[16, HEAD_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
    dtype: gl.constexpr = q_bufs.dtype
    tile, q_row, kv_row, n_blocks = work_item(tile, bh, n_q, n_k, n_tiles, hq, group, BLOCK_M * CONSUMERS,
                                              BLOCK_N, CAUSAL, REVERSE)
    first = tile * BLOCK_M * CONSUMERS + CONSUMER * BLOCK_M  # this consumer's first query of the head
    rows = first + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    clear_to = n_k  # key blocks ending at or before this need no mask
    if CAUSAL:
        clear_to = gl.minimum(n_k, first + 1 + n_k - n_q)
    q_smem = tile_of(q_bufs, CONSUMER, BLOCK_M, HEAD_D, STRIDED)
    zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, s_layout)
    acc = gl.zeros([BLOCK_M, HEAD_D], gl.float32, o_layout)
    mbarrier.wait(q_ready.index(CONSUMER), item & 1)
    # block 0: every row sees key 0, so the running max is finite from here on
    s = warpgroup_mma_wait(0, deps=(scores(q_smem, k_bufs, k_ready, step, zero, BLOCK_N, HEAD_D, NUM_STAGES,
                                              STRIDED), q_smem))[0]
    s = masked(s * qk_scale, 0, rows, n_k, n_q, clear_to, BLOCK_N, CAUSAL, s_layout)
    m_i = gl.max(s, axis=1)
    p = gl.exp2(s - gl.expand_dims(m_i, 1))
    l_i = gl.sum(p, axis=1)
    if OVERLAP:
        for j in range(1, n_blocks):
            slot = (step + j) % NUM_STAGES
            prev = (step + j - 1) % NUM_STAGES
            mbarrier.wait(k_ready.index(slot), ((step + j) // NUM_STAGES) & 1)
            if PINGPONG:
                # the consumers take turns at the tensor cores: this one's two products, then the other's, whose
                # softmax ran under them (consumer 0's first wait passes at once)
                mbarrier.wait(v_ready.index(prev), ((step + j - 1) // NUM_STAGES) & 1)
                mbarrier.wait(turns.index(CONSUMER), ((turn + j - 1) & 1) ^ (1 - CONSUMER))
            s_next = warpgroup_mma(q_smem, tile_of(k_bufs, slot, BLOCK_N, HEAD_D, STRIDED).permute((1, 0)), zero,
                                   use_acc=False, is_async=True)
            if not PINGPONG:
                mbarrier.wait(v_ready.index(prev), ((step + j - 1) // NUM_STAGES) & 1)
            v_tile = tile_of(v_bufs, prev, BLOCK_N, HEAD_D, STRIDED)
            acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_tile, acc, is_async=True)
            if PINGPONG:
                mbarrier.arrive(turns.index(1 - CONSUMER), count=1)
            s = warpgroup_mma_wait(1, deps=(s_next, q_smem))[0]  # the scores are done; P V is still in flight
            s = masked(s * qk_scale, j, rows, n_k, n_q, clear_to, BLOCK_N, CAUSAL, s_layout)
            p, m_i, l_i, alpha = online_softmax(s, m_i, l_i)
            acc = warpgroup_mma_wait(0, deps=(acc, v_tile))[0]
            mbarrier.arrive(empty.index(prev), count=1)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, o_rows), 1)
    else:
        for j in range(1, n_blocks):
            prev = (step + j - 1) % NUM_STAGES
            mbarrier.wait(v_ready.index(prev), ((step + j - 1) // NUM_STAGES) & 1)
            v_tile = tile_of(v_bufs, prev, BLOCK_N, HEAD_D, STRIDED)
            acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_tile, acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc, v_tile))[0]
            mbarrier.arrive(empty.index(prev), count=1)
            s = warpgroup_mma_wait(0, deps=(scores(q_smem, k_bufs, k_ready, step + j, zero, BLOCK_N, HEAD_D,
                                                      NUM_STAGES, STRIDED), q_smem))[0]
            s = masked(s * qk_scale, j, rows, n_k, n_q, clear_to, BLOCK_N, CAUSAL, s_layout)
            p, m_i, l_i, alpha = online_softmax(s, m_i, l_i)
            acc = acc * gl.expand_dims(gl.convert_layout(alpha, o_rows), 1)
    if PERSISTENT:  # every score of the item is in: the producer may load the next item's queries
        mbarrier.arrive(q_empty.index(CONSUMER), count=1)
    last = (step + n_blocks - 1) % NUM_STAGES
    mbarrier.wait(v_ready.index(last), ((step + n_blocks - 1) // NUM_STAGES) & 1)
    v_tile = tile_of(v_bufs, last, BLOCK_N, HEAD_D, STRIDED)
    acc = warpgroup_mma(gl.convert_layout(p.to(dtype), p_layout), v_tile, acc, is_async=True)
    acc = warpgroup_mma_wait(0, deps=(acc, v_tile))[0]
    mbarrier.arrive(empty.index(last), count=1)
    acc = acc / gl.expand_dims(gl.convert_layout(l_i, o_rows), 1)
    out_rows = first + gl.arange(0, BLOCK_M, layout=o_rows)
    out_cols = gl.arange(0, HEAD_D, layout=gl.SliceLayout(0, o_layout))
    at = (bh // hq).to(gl.int64) * so0 + (bh % hq).to(gl.int64) * so1 + gl.expand_dims(out_rows, 1).to(gl.int64) * so2
    inside = gl.expand_dims(out_rows < n_q, 1) & gl.expand_dims(out_cols < HEAD_D, 0)
    gl.store(out + at + gl.expand_dims(out_cols, 0), acc.to(dtype), mask=inside)
    return step + n_blocks, turn + n_blocks - 1


@gluon.jit
def mma_partition(out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty, turns,
                  qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr, CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr,
                  WARPS: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr, OVERLAP: gl.constexpr,
                  PINGPONG: gl.constexpr, STRIDED: gl.constexpr, PERSISTENT: gl.constexpr):
    """A consumer: its rows of this program's work item, or with a persistent grid of each of its items in turn
    (in the producer's order, so the ring's steps and the mbarrier phases agree)."""
    if PERSISTENT:
        step = 0
        turn = 0
        item = 0
        for w in range(gl.program_id(0), n_tiles * bhs, gl.num_programs(0)):
            step, turn = attend(out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                                turns, qk_scale, w // bhs, w % bhs, step, turn, item, n_q, n_k, n_tiles, hq, group,
                                BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES, CONSUMER, CONSUMERS, WARPS, CAUSAL, REVERSE,
                                OVERLAP, PINGPONG, STRIDED, PERSISTENT)
            item += 1
    else:
        attend(out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty, turns, qk_scale,
               gl.program_id(0), gl.program_id(1), 0, 0, 0, n_q, n_k, n_tiles, hq, group, BLOCK_M, BLOCK_N, HEAD_D,
               NUM_STAGES, CONSUMER, CONSUMERS, WARPS, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)


@gluon.jit
def attention_kernel(q_desc, k_desc, v_desc, out, qk_scale, so0, so1, so2, n_q, n_k, n_tiles, hq, group, bhs,
                     BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_D: gl.constexpr, NUM_STAGES: gl.constexpr,
                     CONSUMERS: gl.constexpr, CONSUMER_WARPS: gl.constexpr, CAUSAL: gl.constexpr,
                     REVERSE: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, STRIDED: gl.constexpr,
                     PERSISTENT: gl.constexpr, CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
    """Shared memory and mbarriers for every role, then the roles: consumer 0 in this kernel's own warps, the
    other consumers (four warps each, CONSUMER_REGS registers per thread) and the producer (one warp,
    PRODUCER_REGS) in warps of their own."""
    dtype: gl.constexpr = q_desc.dtype
    if STRIDED:  # the slots take the 4-d descriptors' blocks [1, 1, rows, HEAD_D]
        q_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, 1, 1, BLOCK_M, HEAD_D], q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, 1, BLOCK_N, HEAD_D], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, 1, BLOCK_N, HEAD_D], v_desc.layout)
    else:
        q_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, BLOCK_M, HEAD_D], q_desc.layout)
        k_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], k_desc.layout)
        v_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_N, HEAD_D], v_desc.layout)
    q_ready = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [CONSUMERS, 1], mbarrier.MBarrierLayout())  # persistent grid
    k_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    v_ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # ping-pong's order
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    for i in gl.static_range(CONSUMERS):
        mbarrier.init(q_ready.index(i), count=1)
        mbarrier.init(q_empty.index(i), count=1)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)  # a slot is free once every consumer released it
    if CONSUMERS == 1:
        gl.warp_specialize([
            (mma_partition, (out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                             turns, qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES,
                             0, CONSUMERS, CONSUMER_WARPS, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)),
            (load_partition, (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready,
                              empty, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, NUM_STAGES, CONSUMERS,
                              CAUSAL, REVERSE, STRIDED, PERSISTENT)),
        ], [1], [PRODUCER_REGS])
    elif CONSUMERS == 2:
        gl.warp_specialize([
            (mma_partition, (out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                             turns, qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES,
                             0, CONSUMERS, CONSUMER_WARPS, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)),
            (mma_partition, (out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                             turns, qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES,
                             1, CONSUMERS, 4, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)),
            (load_partition, (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready,
                              empty, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, NUM_STAGES, CONSUMERS,
                              CAUSAL, REVERSE, STRIDED, PERSISTENT)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (mma_partition, (out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                             turns, qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES,
                             0, CONSUMERS, CONSUMER_WARPS, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)),
            (mma_partition, (out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                             turns, qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES,
                             1, CONSUMERS, 4, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)),
            (mma_partition, (out, so0, so1, so2, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready, empty,
                             turns, qk_scale, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, HEAD_D, NUM_STAGES,
                             2, CONSUMERS, 4, CAUSAL, REVERSE, OVERLAP, PINGPONG, STRIDED, PERSISTENT)),
            (load_partition, (q_desc, k_desc, v_desc, q_bufs, k_bufs, v_bufs, q_ready, q_empty, k_ready, v_ready,
                              empty, n_q, n_k, n_tiles, hq, group, bhs, BLOCK_M, BLOCK_N, NUM_STAGES, CONSUMERS,
                              CAUSAL, REVERSE, STRIDED, PERSISTENT)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])


def attention_plan(q, k, v, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: the
    tensor descriptors, the grid and the bound kernel. Returns run(q, k, v, out, scale) for every call of this
    signature. `config` holds the genome's constants (the rendered module's CONFIG)."""
    b, hq, hkv, n_q, n_k, d = check_arguments(q, k, v, out, config["CAUSAL"])
    head_d, block_m, block_n, consumers = config["HEAD_D"], config["BLOCK_M"], config["BLOCK_N"], config["CONSUMERS"]
    if q.dtype not in _GL_DTYPES or d != head_d:
        raise ValueError(f"this kernel was rendered for fp16 or bf16 with head_dim {head_d}; got {described(q)}")
    if b * hq > 65535:
        raise ValueError(f"{b} x {hq} heads exceed a grid axis (65535)")
    group = hq // hkv
    n_tiles = triton.cdiv(n_q, block_m * consumers)
    # contiguous tensors: 2-d descriptors over [batch x heads x length, head_dim] rows; others (a transposed
    # [B, L, H, D] view, a KV-cache slice) in place through 4-d ones when TMA can read them (16-byte aligned
    # base and strides), else copied
    tma_ok = lambda t: t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(
        s % (16 // t.element_size()) == 0 for s in t.stride()[:3])
    strided = any(not t.is_contiguous() for t in (q, k, v)) and all(tma_ok(t) for t in (q, k, v))
    copies = [not strided and (not t.is_contiguous() or t.data_ptr() % 16) for t in (q, k, v)]
    direct = out is None or out.stride(-1) == 1
    dims = [1, 1] if strided else []
    layout = lambda rows: gl.NVMMASharedLayout.get_default_for(dims + [rows, d], _GL_DTYPES[q.dtype])
    if strided:
        specs = {i: (list(t.shape), list(t.stride()), dims + [rows, d], layout(rows))
                 for i, t, rows in ((0, q, block_m), (1, k, block_n), (2, v, block_n))}
    else:
        specs = {0: ([b * hq * n_q, d], [d, 1], [block_m, d], layout(block_m)),
                 1: ([b * hkv * n_k, d], [d, 1], [block_n, d], layout(block_n)),
                 2: ([b * hkv * n_k, d], [d, 1], [block_n, d], layout(block_n))}
    programs = config["PROGRAMS"]
    grid = (min(programs, n_tiles * b * hq),) if programs else (n_tiles, b * hq)
    kernel = BoundKernel(attention_kernel, grid, {"num_warps": config["NUM_WARPS"]}, descriptors=specs)
    consts = (block_m, block_n, head_d, config["NUM_STAGES"], consumers, config["NUM_WARPS"], config["CAUSAL"],
              config["REVERSE"], config["OVERLAP"], config["PINGPONG"], strided, bool(programs),
              config["CONSUMER_REGS"], config["PRODUCER_REGS"])

    def run(q, k, v, out, scale):
        if copies[0] or copies[1] or copies[2]:
            q, k, v = (t.clone(memory_format=torch.contiguous_format) if c else t
                       for t, c in zip((q, k, v), copies, strict=True))
        given = out
        if out is None or not direct:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        qk_scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E
        kernel(q, k, v, out, qk_scale, out.stride(0), out.stride(1), out.stride(2), n_q, n_k, n_tiles, hq, group,
               b * hq, *consts)
        if given is not None and not direct:
            return given.copy_(out)
        return out

    run.kernel = kernel  # for inspection
    run.strided = strided
    return run
