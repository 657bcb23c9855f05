"""The Gluon GEMM: C[M, N] = A[M, K] @ B[K, N] as a persistent Hopper kernel whose roles are warp groups of their
own (genomes/gemm_gluon.py, backend=gluon). A real module: evo renders a module for a genome by writing a header
(the genome's constants), pasting operators/gemm/gluon_split.py and this file from their markers on verbatim, and
the launcher, so the code a search measured and a user exports is this file. The structure genes are constexpr
switches; a branch that a genome turns off is never compiled.

- The producer, one warp with a small register budget, walks the program's tiles and their K steps, waiting
  for a free slot of a ring of `NUM_STAGES` shared-memory buffers (its `empty` mbarrier) and filling it with
  the A and B tiles by TMA (the copy arrives on the slot's `ready` mbarrier with its byte count).
- Each consumer, one or two warp groups with the rest of the registers, waits on `ready`, issues the K step's
  wgmma asynchronously, keeps one in flight, and frees the slot of the step before once its wgmma retired. At
  the end of a tile it applies the fused epilogue to the fp32 accumulator, converts it, stages it in shared
  memory and stores it by TMA without waiting: the store drains while the next tile's main loop runs (it is
  waited for only before the staging buffer is written again).
- CONSUMERS = 2 (ping-pong) splits the program's tiles between two one-warp-group consumers, alternately: the
  ring is filled in tile order, so one consumer's main loop runs while the other converts and stores. The two
  take turns at the ring through a pair of mbarriers (`turns`): without them the second consumer waited on a
  slot's parity a whole round early, took the first tile's data for its own and faulted (seen on an H100).
- ROW_SPLIT (consumer_split=rows): 2 or 3 one-warp-group consumers take ROWS = 64 rows each of every tile around
  one B tile, so BLOCK_M is 128 or 192 (a 192-row tile without non-power-of-two tensors: each consumer's A box
  and accumulator are its own). The producer loads one A box per consumer into the slot; a slot's `empty` barrier
  counts one arrival per consumer; no turns are needed, since every consumer reads every slot in ring order. Each
  warp group then synchronises only with itself (Triton puts a warp-group barrier before every mbarrier arrive).
- A wide tile (BLOCK_N 96, 192 or 320; BLOCK_N1 > 0) is two column blocks, BLOCK_N0 + BLOCK_N1 (powers of two: wgmma
  takes such widths, Gluon tensors do not): the producer loads a B tile of each per K step, the consumer issues a
  wgmma on each into an accumulator of its own and stores each through its own staging buffer and descriptor.
- SPLIT_K > 1 and STREAM_K share a tile's K steps among programs (operators/gemm/gluon_split.py).
Every index into the ring follows from the step's position in the program's sequence of K steps, the same count
in the producer and the consumers, so the mbarrier phases need no other shared state.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from operators.gemm.gluon_split import stream_k_fixup, stream_k_item, stream_k_runs

# ---- evo pastes this file from here on into every module it renders for this family ----

# the TMA copies as Triton 3.9 names them, or as 3.6 (the older names are gone from 3.9)
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global


@gluon.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: gl.constexpr, COL_MAJOR: gl.constexpr):
    """Tile id -> (pid_m, pid_n) in row-major order, or column-major with COL_MAJOR; with GROUP_M > 1, GROUP_M
    tile-rows walk N together (GROUP_M tile-columns walk M), so their B (A) tiles are reused from L2."""
    if GROUP_M == 1:
        if not COL_MAJOR:
            pid_m = tile_id // num_pid_n
            pid_n = tile_id % num_pid_n
        else:
            pid_n = tile_id // num_pid_m
            pid_m = tile_id % num_pid_m
    elif not COL_MAJOR:
        tiles_per_group = GROUP_M * num_pid_n
        first_m = (tile_id // tiles_per_group) * GROUP_M
        group_rows = gl.minimum(num_pid_m - first_m, GROUP_M)
        local = tile_id % tiles_per_group
        pid_m = first_m + local % group_rows
        pid_n = local // group_rows
    else:
        tiles_per_group = GROUP_M * num_pid_m
        first_n = (tile_id // tiles_per_group) * GROUP_M
        group_cols = gl.minimum(num_pid_n - first_n, GROUP_M)
        local = tile_id % tiles_per_group
        pid_n = first_n + local % group_cols
        pid_m = local // group_cols
    return pid_m, pid_n


@gluon.jit
def apply_epilogue(acc, bias_ptr, residual_ptr, scale, row0, col0, M, N, layout: gl.constexpr, SCALE: gl.constexpr,
                   BIAS: gl.constexpr, ACTIVATION: gl.constexpr, RESIDUAL: gl.constexpr):
    """The fused epilogue (operators/gemm/epilogue.py) on the fp32 accumulator `acc` (layout `layout`) of C's rows
    from row0 and columns from col0, in this order: scale, + bias[N], the activation (None, "gelu", "gelu_tanh",
    "silu" or "relu"), + residual[M, N]. Rows >= M and columns >= N read zeros (the TMA store drops them). Gluon has
    erf and exp, no sigmoid: sigmoid(u) = 1 / (1 + exp(-u))."""
    if BIAS or RESIDUAL:
        offs_en = col0 + gl.arange(0, acc.shape[1], layout=gl.SliceLayout(0, layout))
    if RESIDUAL:
        offs_em = row0 + gl.arange(0, acc.shape[0], layout=gl.SliceLayout(1, layout))
    if SCALE:
        acc = acc * scale
    if BIAS:
        acc += gl.expand_dims(gl.load(bias_ptr + offs_en, mask=offs_en < N, other=0.0).to(gl.float32), 0)
    if ACTIVATION == "gelu":
        acc = 0.5 * acc * (1.0 + gl.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        acc = acc / (1.0 + gl.exp(-1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)))
    elif ACTIVATION == "silu":
        acc = acc / (1.0 + gl.exp(-acc))
    elif ACTIVATION == "relu":
        acc = gl.maximum(acc, 0.0)
    if RESIDUAL:
        ep_mask = (gl.expand_dims(offs_em, 1) < M) & (gl.expand_dims(offs_en, 0) < N)
        ep_offs = gl.expand_dims(offs_em, 1) * N + gl.expand_dims(offs_en, 0)
        acc += gl.load(residual_ptr + ep_offs, mask=ep_mask, other=0.0).to(gl.float32)
    return acc


@gluon.jit
def load_steps(a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, pid_m, pid_n, k_lo, k_hi, step,
               BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BLOCK_N0: gl.constexpr,
               BLOCK_N1: gl.constexpr, NUM_STAGES: gl.constexpr, READERS: gl.constexpr, ROWS: gl.constexpr):
    """The producer's K steps [k_lo, k_hi) of tile (pid_m, pid_n), each into the next slot of the ring: READERS
    boxes of ROWS rows of A (one per consumer that reads the slot), a B tile per column block. Returns the step
    count after them."""
    for kk in range(k_lo, k_hi):
        slot = step % NUM_STAGES
        # wait for the slot's previous tile to be consumed (a fresh barrier passes the first round)
        mbarrier.wait(empty.index(slot), ((step // NUM_STAGES) & 1) ^ 1)
        if BLOCK_N1 > 0:
            mbarrier.expect(ready.index(slot), READERS * a_desc.block_type.nbytes + b_desc.block_type.nbytes
                            + b1_desc.block_type.nbytes)
        else:
            mbarrier.expect(ready.index(slot), READERS * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        for r in gl.static_range(READERS):
            tma_load(a_desc, [pid_m * BLOCK_M + r * ROWS, kk * BLOCK_K], ready.index(slot),
                     a_bufs.index(slot * READERS + r))
        tma_load(b_desc, [kk * BLOCK_K, pid_n * BLOCK_N], ready.index(slot), b_bufs.index(slot))
        if BLOCK_N1 > 0:
            tma_load(b1_desc, [kk * BLOCK_K, pid_n * BLOCK_N + BLOCK_N0], ready.index(slot), b1_bufs.index(slot))
        step += 1
    return step


@gluon.jit
def load_partition(a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, M, N, K, sk_share,
                   BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BLOCK_N0: gl.constexpr,
                   BLOCK_N1: gl.constexpr, GROUP_M: gl.constexpr, COL_MAJOR: gl.constexpr, NUM_STAGES: gl.constexpr,
                   READERS: gl.constexpr, ROWS: gl.constexpr, SPLIT_K: gl.constexpr, STREAM_K: gl.constexpr):
    """The producer: every K step of every work item of this program, in order, into the next slot of the ring."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    step = 0
    if STREAM_K:
        works, dp_tiles, run_lo, run_hi = stream_k_runs(num_pid_m * num_pid_n, k_tiles, sk_share)
        for w in range(works):
            tile_id, k_lo, k_hi, first_step = stream_k_item(w, dp_tiles, run_lo, run_hi, k_tiles)
            pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, COL_MAJOR)
            step = load_steps(a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, pid_m, pid_n, k_lo,
                              k_hi, step, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, NUM_STAGES, READERS, ROWS)
    else:
        # a work item is a tile, or with split-K one of its SPLIT_K ranges of K steps (the same count for every
        # split: steps past K load zeros)
        k_steps = gl.cdiv(k_tiles, SPLIT_K)
        for work in range(gl.program_id(0), num_pid_m * num_pid_n * SPLIT_K, gl.num_programs(0)):
            tile_id = work // SPLIT_K
            pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, COL_MAJOR)
            step = load_steps(a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, pid_m, pid_n,
                              work % SPLIT_K * k_steps, (work % SPLIT_K + 1) * k_steps, step, BLOCK_M, BLOCK_N,
                              BLOCK_K, BLOCK_N0, BLOCK_N1, NUM_STAGES, READERS, ROWS)


@gluon.jit
def mma_steps(a_bufs, b_bufs, ready, empty, turns, step, steps, mine, layout: gl.constexpr, ROWS: gl.constexpr,
              WIDTH: gl.constexpr, NUM_STAGES: gl.constexpr, READERS: gl.constexpr, BOX: gl.constexpr,
              CONSUMER: gl.constexpr, TURNS: gl.constexpr):
    """A consumer's `steps` K steps of one tile from ring step `step` on, accumulated from zero into a [ROWS, WIDTH]
    fp32 accumulator by asynchronous wgmma on A box BOX of each slot; frees each slot once its wgmma retired.
    Returns the accumulator. TURNS: ping-pong's turns at the ring, `mine` counting this consumer's tiles."""
    if TURNS:
        # take turns at the ring: a consumer's K steps start only once the other's previous tile has waited for
        # all of its own (a slot's parity names one of two rounds, so the ring's reader must never be more than a
        # round ahead of it); consumer 0's first wait passes at once
        mbarrier.wait(turns.index(CONSUMER), (mine & 1) ^ (1 - CONSUMER))
    acc = gl.zeros([ROWS, WIDTH], gl.float32, layout)
    for kk in range(steps):
        slot = step % NUM_STAGES
        mbarrier.wait(ready.index(slot), (step // NUM_STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(slot * READERS + BOX), b_bufs.index(slot), acc, is_async=True)
        # at most one wgmma in flight: the previous step's has retired, so its slot is free again
        acc = warpgroup_mma_wait(1, deps=(acc, a_bufs.index(slot * READERS + BOX), b_bufs.index(slot)))[0]
        mbarrier.arrive(empty.index((step + NUM_STAGES - 1) % NUM_STAGES), count=1, pred=kk > 0)
        step += 1
    if TURNS:
        mbarrier.arrive(turns.index(1 - CONSUMER), count=1)  # the other consumer's turn at the ring
    acc = warpgroup_mma_wait(0, deps=(acc,))
    mbarrier.arrive(empty.index((step + NUM_STAGES - 1) % NUM_STAGES), count=1)
    return acc


@gluon.jit
def mma_steps_wide(a_bufs, b_bufs, b1_bufs, ready, empty, turns, step, steps, mine, layout: gl.constexpr,
                   layout1: gl.constexpr, ROWS: gl.constexpr, WIDTH0: gl.constexpr, WIDTH1: gl.constexpr,
                   NUM_STAGES: gl.constexpr, READERS: gl.constexpr, BOX: gl.constexpr, CONSUMER: gl.constexpr,
                   TURNS: gl.constexpr):
    """mma_steps for a tile of two column blocks: a wgmma per block on the same A box, into an accumulator of each
    block's width. Returns both."""
    if TURNS:
        mbarrier.wait(turns.index(CONSUMER), (mine & 1) ^ (1 - CONSUMER))  # as in mma_steps
    acc = gl.zeros([ROWS, WIDTH0], gl.float32, layout)
    acc1 = gl.zeros([ROWS, WIDTH1], gl.float32, layout1)
    for kk in range(steps):
        slot = step % NUM_STAGES
        mbarrier.wait(ready.index(slot), (step // NUM_STAGES) & 1)
        acc = warpgroup_mma(a_bufs.index(slot * READERS + BOX), b_bufs.index(slot), acc, is_async=True)
        acc1 = warpgroup_mma(a_bufs.index(slot * READERS + BOX), b1_bufs.index(slot), acc1, is_async=True)
        # at most one step's two wgmma in flight: the previous step's have retired, so its slot is free again
        done = warpgroup_mma_wait(2, deps=(acc, acc1, a_bufs.index(slot * READERS + BOX), b_bufs.index(slot),
                                           b1_bufs.index(slot)))
        acc = done[0]
        acc1 = done[1]
        mbarrier.arrive(empty.index((step + NUM_STAGES - 1) % NUM_STAGES), count=1, pred=kk > 0)
        step += 1
    if TURNS:
        mbarrier.arrive(turns.index(1 - CONSUMER), count=1)
    done = warpgroup_mma_wait(0, deps=(acc, acc1))
    mbarrier.arrive(empty.index((step + NUM_STAGES - 1) % NUM_STAGES), count=1)
    return done[0], done[1]


@gluon.jit
def store_block(acc, c_smem, c_desc, row0, col0):
    """One column block of a tile: converted, staged in shared memory, stored by TMA without waiting for it."""
    c_smem.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma_store(c_desc, [row0, col0], c_smem)


@gluon.jit
def mma_partition(c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs, b1_bufs, c_bufs,
                  c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, BLOCK_N0: gl.constexpr, BLOCK_N1: gl.constexpr,
                  GROUP_M: gl.constexpr, COL_MAJOR: gl.constexpr, NUM_STAGES: gl.constexpr, CONSUMERS: gl.constexpr,
                  ROW_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr, STREAM_K: gl.constexpr, SCALE: gl.constexpr,
                  BIAS: gl.constexpr, ACTIVATION: gl.constexpr, RESIDUAL: gl.constexpr, CONSUMER: gl.constexpr,
                  WARPS: gl.constexpr):
    """Consumer CONSUMER (of WARPS warps): with a row split ROWS rows, from CONSUMER * ROWS on, of every work item of
    this program; else items CONSUMER, CONSUMER + CONSUMERS, ... (ping-pong, or every item for one consumer)."""
    ROWS: gl.constexpr = BLOCK_M // CONSUMERS if ROW_SPLIT else BLOCK_M
    READERS: gl.constexpr = CONSUMERS if ROW_SPLIT else 1  # consumers that read each slot, an A box each
    BOX: gl.constexpr = CONSUMER if ROW_SPLIT else 0  # this consumer's A box of a slot and rows of a tile
    FIRST: gl.constexpr = 0 if ROW_SPLIT else CONSUMER  # this consumer's first work item of the program
    TAKERS: gl.constexpr = 1 if ROW_SPLIT else CONSUMERS  # consumers that share out the work items
    TURNS: gl.constexpr = TAKERS > 1  # ping-pong: the consumers take turns at the ring
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                         instr_shape=[16, BLOCK_N0, 16])
    c_smem = c_bufs.index(CONSUMER)
    if BLOCK_N1 > 0:
        acc1_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
                                                              instr_shape=[16, BLOCK_N1, 16])
        c1_smem = c1_bufs.index(CONSUMER)
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    if STREAM_K:
        works, dp_tiles, run_lo, run_hi = stream_k_runs(num_pid_m * num_pid_n, k_tiles, sk_share)
        for w in range(works):
            tile_id, k_lo, k_hi, first_step = stream_k_item(w, dp_tiles, run_lo, run_hi, k_tiles)
            pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, COL_MAJOR)
            acc = mma_steps(a_bufs, b_bufs, ready, empty, turns, first_step, k_hi - k_lo, 0, acc_layout, ROWS,
                            BLOCK_N0, NUM_STAGES, READERS, BOX, CONSUMER, TURNS)
            store = k_hi - k_lo == k_tiles  # one run covered the whole tile
            if k_hi - k_lo < k_tiles:
                acc, store = stream_k_fixup(acc, partials, counters, tile_id - dp_tiles, k_tiles, sk_share, sk_slots,
                                            CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, acc_layout)
            if store:
                row0 = pid_m * BLOCK_M + BOX * ROWS
                acc = apply_epilogue(acc, bias_ptr, residual_ptr, scale, row0, pid_n * BLOCK_N, M, N, acc_layout,
                                     SCALE, BIAS, ACTIVATION, RESIDUAL)
                tma.store_wait(0)  # the previous tile's store has left the staging buffer
                store_block(acc, c_smem, c_desc, row0, pid_n * BLOCK_N)
    else:
        k_steps = gl.cdiv(k_tiles, SPLIT_K)
        mine = 0  # work items this consumer has taken
        for work in range(pid + FIRST * programs, num_pid_m * num_pid_n * SPLIT_K, TAKERS * programs):
            tile_id = work // SPLIT_K
            pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, COL_MAJOR)
            step = (work - pid) // programs * k_steps  # this item's first K step in the program's sequence
            if BLOCK_N1 > 0:
                acc, acc1 = mma_steps_wide(a_bufs, b_bufs, b1_bufs, ready, empty, turns, step, k_steps, mine,
                                           acc_layout, acc1_layout, ROWS, BLOCK_N0, BLOCK_N1, NUM_STAGES, READERS,
                                           BOX, CONSUMER, TURNS)
            else:
                acc = mma_steps(a_bufs, b_bufs, ready, empty, turns, step, k_steps, mine, acc_layout, ROWS, BLOCK_N0,
                                NUM_STAGES, READERS, BOX, CONSUMER, TURNS)
            mine += 1
            if SPLIT_K > 1:
                # the item's fp32 partial (this consumer's ROWS rows of it) leaves from registers for the workspace
                # (no staging buffer); the second launch (sum_partials) sums the partials, applies the epilogue and
                # writes C
                rows = pid_m * BLOCK_M + BOX * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc_layout))
                cols = pid_n * BLOCK_N + gl.arange(0, BLOCK_N0, layout=gl.SliceLayout(0, acc_layout))
                inside = (gl.expand_dims(rows, 1) < M) & (gl.expand_dims(cols, 0) < N)
                at = (work % SPLIT_K * M + gl.expand_dims(rows, 1)) * N + gl.expand_dims(cols, 0)
                gl.store(partials + at, acc, mask=inside)
                if BLOCK_N1 > 0:  # a wide tile's second column block, from its own accumulator
                    rows1 = pid_m * BLOCK_M + BOX * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, acc1_layout))
                    cols1 = pid_n * BLOCK_N + BLOCK_N0 + gl.arange(0, BLOCK_N1, layout=gl.SliceLayout(0, acc1_layout))
                    inside1 = (gl.expand_dims(rows1, 1) < M) & (gl.expand_dims(cols1, 0) < N)
                    at1 = (work % SPLIT_K * M + gl.expand_dims(rows1, 1)) * N + gl.expand_dims(cols1, 0)
                    gl.store(partials + at1, acc1, mask=inside1)
            else:
                row0 = pid_m * BLOCK_M + BOX * ROWS
                acc = apply_epilogue(acc, bias_ptr, residual_ptr, scale, row0, pid_n * BLOCK_N, M, N, acc_layout,
                                     SCALE, BIAS, ACTIVATION, RESIDUAL)
                if BLOCK_N1 > 0:
                    acc1 = apply_epilogue(acc1, bias_ptr, residual_ptr, scale, row0, pid_n * BLOCK_N + BLOCK_N0, M,
                                          N, acc1_layout, SCALE, BIAS, ACTIVATION, RESIDUAL)
                tma.store_wait(0)  # the previous tile's store has left the staging buffer
                store_block(acc, c_smem, c_desc, row0, pid_n * BLOCK_N)
                if BLOCK_N1 > 0:
                    store_block(acc1, c1_smem, c1_desc, row0, pid_n * BLOCK_N + BLOCK_N0)
    tma.store_wait(0)


@gluon.jit
def gemm_kernel(a_desc, b_desc, b1_desc, c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, M, N, K,
                sk_share, sk_slots, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                BLOCK_N0: gl.constexpr, BLOCK_N1: gl.constexpr, GROUP_M: gl.constexpr, COL_MAJOR: gl.constexpr,
                NUM_STAGES: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_WARPS: gl.constexpr,
                ROW_SPLIT: gl.constexpr, SPLIT_K: gl.constexpr, STREAM_K: gl.constexpr, SCALE: gl.constexpr,
                BIAS: gl.constexpr, ACTIVATION: gl.constexpr, RESIDUAL: gl.constexpr):
    """Shared memory and mbarriers for every role, then the roles: consumer 0 in this kernel's own warps, the other
    consumers and the producer in warps of their own. BLOCK_N0, BLOCK_N1: the tile's column blocks (BLOCK_N, 0 for
    one); COL_MAJOR and GROUP_M: the tile order; ACTIVATION: None, "gelu", "gelu_tanh", "silu" or "relu". A second
    column block's descriptors (b1_desc, c1_desc), the epilogue's operands and the split-K / stream-K workspace
    (partials, counters, sk_share, sk_slots) may be None where their switch is off."""
    ROWS: gl.constexpr = BLOCK_M // CONSUMERS if ROW_SPLIT else BLOCK_M  # rows of a tile per consumer
    READERS: gl.constexpr = CONSUMERS if ROW_SPLIT else 1  # consumers that read each slot, an A box each
    # registers per thread: the producer warp holds only indices and barrier phases; a consumer warp group after
    # the first gets 232, or 152 of three (16 warps share the 64K registers: 4 x 128 x 152 + the producer's)
    PRODUCER_REGS: gl.constexpr = 40
    CONSUMER_REGS: gl.constexpr = 152 if CONSUMERS == 3 else 232
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * READERS, ROWS, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_K, BLOCK_N0], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, ROWS, BLOCK_N0], c_desc.layout)
    if BLOCK_N1 > 0:
        b1_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_K, BLOCK_N1], b1_desc.layout)
        c1_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, ROWS, BLOCK_N1], c1_desc.layout)
    else:
        b1_bufs: gl.constexpr = None
        c1_bufs: gl.constexpr = None
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # ping-pong's order
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=READERS)
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    # consumer 0 in this kernel's warps (the default partition), consumers 1 and 2 and the producer in their own
    if CONSUMERS == 1:
        gl.warp_specialize([
            (mma_partition, (c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs,
                             b1_bufs, c_bufs, c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M,
                             BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES, CONSUMERS,
                             ROW_SPLIT, SPLIT_K, STREAM_K, SCALE, BIAS, ACTIVATION, RESIDUAL, 0, CONSUMER_WARPS)),
            (load_partition, (a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, M, N, K, sk_share,
                              BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES,
                              READERS, ROWS, SPLIT_K, STREAM_K)),
        ], [1], [PRODUCER_REGS])
    elif CONSUMERS == 2:
        gl.warp_specialize([
            (mma_partition, (c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs,
                             b1_bufs, c_bufs, c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M,
                             BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES, CONSUMERS,
                             ROW_SPLIT, SPLIT_K, STREAM_K, SCALE, BIAS, ACTIVATION, RESIDUAL, 0, CONSUMER_WARPS)),
            (mma_partition, (c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs,
                             b1_bufs, c_bufs, c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M,
                             BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES, CONSUMERS,
                             ROW_SPLIT, SPLIT_K, STREAM_K, SCALE, BIAS, ACTIVATION, RESIDUAL, 1, 4)),
            (load_partition, (a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, M, N, K, sk_share,
                              BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES,
                              READERS, ROWS, SPLIT_K, STREAM_K)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (mma_partition, (c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs,
                             b1_bufs, c_bufs, c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M,
                             BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES, CONSUMERS,
                             ROW_SPLIT, SPLIT_K, STREAM_K, SCALE, BIAS, ACTIVATION, RESIDUAL, 0, CONSUMER_WARPS)),
            (mma_partition, (c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs,
                             b1_bufs, c_bufs, c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M,
                             BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES, CONSUMERS,
                             ROW_SPLIT, SPLIT_K, STREAM_K, SCALE, BIAS, ACTIVATION, RESIDUAL, 1, 4)),
            (mma_partition, (c_desc, c1_desc, bias_ptr, residual_ptr, scale, partials, counters, a_bufs, b_bufs,
                             b1_bufs, c_bufs, c1_bufs, ready, empty, turns, M, N, K, sk_share, sk_slots, BLOCK_M,
                             BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES, CONSUMERS,
                             ROW_SPLIT, SPLIT_K, STREAM_K, SCALE, BIAS, ACTIVATION, RESIDUAL, 2, 4)),
            (load_partition, (a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, M, N, K, sk_share,
                              BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M, COL_MAJOR, NUM_STAGES,
                              READERS, ROWS, SPLIT_K, STREAM_K)),
        ], [4, 4, 1], [CONSUMER_REGS, CONSUMER_REGS, PRODUCER_REGS])
