"""The Triton GEMM: C[M, N] = A[M, K] @ B[K, N] (fp32 accumulation), with its fused epilogues, as one real kernel.

evo renders a module for a genome by writing a header (the genome's constants and the entry function) and pasting
below it operators/gemm/tile_store.py (the epilogue, the store, the split-K and stream-K reductions), this file
below the marker verbatim, then operators/gemm/host.py and plan.py (the launch plan): the code a search measured and a
user exports is this file. Every structure gene is a constexpr switch, so Triton compiles only the branches a genome
turns on:
- MEMORY: "pointer" loads (rows and columns past the edge read row/column 0, never stored; only the last K step is
  masked), "descriptor" (tensor descriptors made in the kernel: TMA on Hopper, no masks) or "host_descriptor" (the
  launcher's descriptors passed in as a, b, b1, c, c1);
- PERSISTENT: one program per SM strides over the tiles (a flattened loop, so the next tile's loads run under the
  current tile's epilogue); with STREAM_K the tiles of the last partial wave are shared by K steps;
- SPLIT_K > 1: programs share each tile along K, publish fp32 partials, and the last to arrive sums them in order
  (in two levels beyond 2 * SPLIT_GROUP splits: long K over few tiles, where tens of splits fill the GPU);
- WIDE: a tile of two power-of-two column blocks (BLOCK_N0 + BLOCK_N1 = 96, 192 or 320 columns);
- SUBTILE: the tile leaves in two halves along N (half the staging buffer);
- GROUP_M, COLUMN_MAJOR: the program-id swizzle; LOOP_STAGES, LOOP_UNROLL, WARP_SPECIALIZE: the K loop's hints;
- ALIGN_K, ALIGN_N: K or N is a multiple of ROW_ALIGN though not of 16, stated so that loads vectorize;
- the epilogue, in fp32 before the cast: SCALE, BIAS, ACTIVATION, SWIGLU or GEGLU (a gate: B holds the gate's N
  columns, then the up projection's, read into two accumulators; silu(gate) * up or gelu_tanh(gate) * up), RESIDUAL.
"""

import triton
import triton.language as tl

from operators.gemm.tile_store import _gelu_tanh, _reduce_partials, _reduce_split, _store_tile

# ---- evo pastes this file from here on into every module it renders for this family ----

@triton.jit
def tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr, COLUMN_MAJOR: tl.constexpr):
    """(pid_m, pid_n) of a tile id: row- or column-major order, in groups of GROUP_M tile-rows (tile-columns) that
    walk the other axis together so that their B (A) tiles are reused from L2."""
    if GROUP_M == 1:
        if COLUMN_MAJOR:
            pid_n = tile_id // num_pid_m
            pid_m = tile_id % num_pid_m
        else:
            pid_m = tile_id // num_pid_n
            pid_n = tile_id % num_pid_n
    elif COLUMN_MAJOR:
        tiles_per_group = GROUP_M * num_pid_m
        first_n = (tile_id // tiles_per_group) * GROUP_M
        group_cols = tl.minimum(num_pid_n - first_n, GROUP_M)
        local = tile_id % tiles_per_group
        pid_n = first_n + local % group_cols
        pid_m = local // group_cols
    else:
        tiles_per_group = GROUP_M * num_pid_n
        first_m = (tile_id // tiles_per_group) * GROUP_M
        group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
        local = tile_id % tiles_per_group
        pid_m = first_m + local % group_rows
        pid_n = local // group_rows
    return pid_m, pid_n


@triton.jit
def _pointer_k_steps(a_ptr, b_ptr, offs_k, pid_m, pid_n, M, N, K, k_lo, k_hi, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N0: tl.constexpr, BLOCK_N1: tl.constexpr,
                     WIDE: tl.constexpr, GATED: tl.constexpr, PARTIAL: tl.constexpr, LOOP_STAGES: tl.constexpr,
                     LOOP_UNROLL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """The fp32 sums over K steps [k_lo, k_hi) of A's and B's tiles at (pid_m, pid_n), loaded through pointers: one
    accumulator per B tile (a wide tile's two column blocks; a gated epilogue's gate and up projection: GATED), the
    second the first again when there is one. Rows and columns past the edge read row/column 0 instead (their results
    are never stored), so loads are masked along K only, and only in the last K step (peeled) when K is not a
    multiple of BLOCK_K; the hints let the compiler vectorize them. PARTIAL: [k_lo, k_hi) is a split of K."""
    B_ROWS: tl.constexpr = 2 if GATED else 1  # B's rows hold B_ROWS * N columns: the gate's, then up's
    offs_am = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_bn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N0)
    if WIDE:
        offs_bn1 = pid_n * BLOCK_N + BLOCK_N0 + tl.arange(0, BLOCK_N1)
    offs_am = tl.max_contiguous(tl.multiple_of(tl.where(offs_am < M, offs_am, 0), BLOCK_M), BLOCK_M)
    align: tl.constexpr = BLOCK_N1 if WIDE else BLOCK_N0  # where every column block starts: a multiple of it
    offs_bn = tl.max_contiguous(tl.multiple_of(tl.where(offs_bn < N, offs_bn, 0), align), BLOCK_N0)
    if WIDE:
        offs_bn1 = tl.max_contiguous(tl.multiple_of(tl.where(offs_bn1 < N, offs_bn1, 0), align), BLOCK_N1)
    a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * B_ROWS * N + offs_bn[None, :]
    if WIDE:
        b_ptrs1 = b_ptr + offs_k[:, None] * N + offs_bn1[None, :]
    if GATED:
        b_ptrs1 = b_ptrs + N
    acc = tl.zeros((BLOCK_M, BLOCK_N0), dtype=tl.float32)
    if WIDE:
        acc1 = tl.zeros((BLOCK_M, BLOCK_N1), dtype=tl.float32)
    if GATED:
        acc1 = tl.zeros((BLOCK_M, BLOCK_N0), dtype=tl.float32)
    k_full = K // BLOCK_K  # K steps that need no mask
    k_end = tl.minimum(k_hi, k_full) if PARTIAL else k_full
    for ki in tl.range(k_lo, k_end, num_stages=LOOP_STAGES, loop_unroll_factor=LOOP_UNROLL,
                       warp_specialize=WARP_SPECIALIZE):
        a = tl.load(a_ptrs + ki * BLOCK_K)
        b = tl.load(b_ptrs + ki * BLOCK_K * B_ROWS * N)
        if WIDE or GATED:
            b1 = tl.load(b_ptrs1 + ki * BLOCK_K * B_ROWS * N)
        acc = tl.dot(a, b, acc)
        if WIDE or GATED:
            acc1 = tl.dot(a, b1, acc1)
    if k_hi > k_full:  # the last K step is partial: the peeled, masked tail
        k_left = K - k_full * BLOCK_K
        a = tl.load(a_ptrs + k_full * BLOCK_K, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs + k_full * BLOCK_K * B_ROWS * N, mask=offs_k[:, None] < k_left, other=0.0)
        if WIDE or GATED:
            b1 = tl.load(b_ptrs1 + k_full * BLOCK_K * B_ROWS * N, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)
        if WIDE or GATED:
            acc1 = tl.dot(a, b1, acc1)
    second = acc
    if WIDE or GATED:
        second = acc1
    return acc, second


@triton.jit
def _descriptor_k_steps(a_desc, b_desc, b_desc1, pid_m, pid_n, N, k_lo, k_hi, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N0: tl.constexpr, BLOCK_N1: tl.constexpr,
                        WIDE: tl.constexpr, GATED: tl.constexpr, LOOP_STAGES: tl.constexpr,
                        LOOP_UNROLL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """As _pointer_k_steps, through tensor descriptors: reads past the edges return zeros, so nothing is masked."""
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N0), dtype=tl.float32)
    if WIDE:
        acc1 = tl.zeros((BLOCK_M, BLOCK_N1), dtype=tl.float32)
    if GATED:
        acc1 = tl.zeros((BLOCK_M, BLOCK_N0), dtype=tl.float32)
    for ki in tl.range(k_lo, k_hi, num_stages=LOOP_STAGES, loop_unroll_factor=LOOP_UNROLL,
                       warp_specialize=WARP_SPECIALIZE):
        a = a_desc.load([off_m, ki * BLOCK_K])
        b = b_desc.load([ki * BLOCK_K, off_n])
        if WIDE:
            b1 = b_desc1.load([ki * BLOCK_K, off_n + BLOCK_N0])
        if GATED:  # the up projection's columns follow the gate's N
            b1 = b_desc.load([ki * BLOCK_K, off_n + N])
        acc = tl.dot(a, b, acc)
        if WIDE or GATED:
            acc1 = tl.dot(a, b1, acc1)
    second = acc
    if WIDE or GATED:
        second = acc1
    return acc, second


@triton.jit
def _k_steps(a, b_desc, b_desc1, offs_k, pid_m, pid_n, M, N, K, k_lo, k_hi, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N0: tl.constexpr, BLOCK_N1: tl.constexpr,
             WIDE: tl.constexpr, SWIGLU: tl.constexpr, GEGLU: tl.constexpr, PARTIAL: tl.constexpr,
             MEMORY: tl.constexpr, LOOP_STAGES: tl.constexpr, LOOP_UNROLL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr):
    """The tile's accumulators over K steps [k_lo, k_hi): `a` and `b_desc` are A's and B's pointers or descriptors;
    with a gate (SWIGLU, GEGLU) the first is the gated product."""
    GATED: tl.constexpr = SWIGLU or GEGLU  # two B tiles: the gate's columns, then the up projection's
    if MEMORY == "pointer":
        acc, acc1 = _pointer_k_steps(a, b_desc, offs_k, pid_m, pid_n, M, N, K, k_lo, k_hi, BLOCK_M, BLOCK_N, BLOCK_K,
                                     BLOCK_N0, BLOCK_N1, WIDE, GATED, PARTIAL, LOOP_STAGES, LOOP_UNROLL,
                                     WARP_SPECIALIZE)
    else:
        acc, acc1 = _descriptor_k_steps(a, b_desc, b_desc1, pid_m, pid_n, N, k_lo, k_hi, BLOCK_M, BLOCK_N, BLOCK_K,
                                        BLOCK_N0, BLOCK_N1, WIDE, GATED, LOOP_STAGES, LOOP_UNROLL, WARP_SPECIALIZE)
    if SWIGLU:
        acc = acc * tl.sigmoid(acc) * acc1  # silu(gate) * up
    if GEGLU:
        acc = _gelu_tanh(acc) * acc1  # gelu_tanh(gate) * up
    return acc, acc1


@triton.jit(do_not_specialize=["sk_share", "sk_slots"])  # stream-K's sizes follow the SM count: one kernel, any GPU
def matmul_kernel(
    a, b, b1, c, c1,  # A[M, K], B[K, N], C[M, N] (row-major): pointers, or the launcher's descriptors (b1, c1: WIDE)
    bias_ptr, residual_ptr, scale,  # the epilogue's operands (None where it has none)
    ws_ptr, counter_ptr,  # split-K and stream-K: fp32 partial-tile slots, per-tile arrival counters
    M, N, K, num_sms,  # num_sms: the persistent grid's size, a runtime argument (one kernel serves every GPU)
    sk_share, sk_slots,  # stream-K: K steps per program, partial slots per shared tile
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_N0: tl.constexpr,
    BLOCK_N1: tl.constexpr, WIDE: tl.constexpr, GROUP_M: tl.constexpr, COLUMN_MAJOR: tl.constexpr,
    MEMORY: tl.constexpr, PERSISTENT: tl.constexpr, STREAM_K: tl.constexpr, SPLIT_K: tl.constexpr,
    SUBTILE: tl.constexpr, LOOP_STAGES: tl.constexpr, LOOP_UNROLL: tl.constexpr, WARP_SPECIALIZE: tl.constexpr,
    ROW_ALIGN: tl.constexpr, ALIGN_K: tl.constexpr, ALIGN_N: tl.constexpr, SCALE: tl.constexpr,
    BIAS: tl.constexpr, ACTIVATION: tl.constexpr, SWIGLU: tl.constexpr, GEGLU: tl.constexpr, RESIDUAL: tl.constexpr,
):
    # K and N multiples of ROW_ALIGN (the launcher checks): Triton learns only divisibility by 16 from integer
    # arguments; restating it lets 16-byte loads and stores of whole rows vectorize
    if ALIGN_K:
        K = K // ROW_ALIGN * ROW_ALIGN
    if ALIGN_N:
        N = N // ROW_ALIGN * ROW_ALIGN
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    a_desc, b_desc, b_desc1, c_desc, c_desc1 = a, b, b1, c, c1
    if MEMORY == "descriptor":
        # tensor descriptors made here (TMA on Hopper): reads past the edges return zeros, writes there are
        # dropped, so ragged edges need no masks
        ldb = 2 * N if SWIGLU or GEGLU else N  # a gate's B holds the gate's N columns, then the up projection's
        c_block: tl.constexpr = BLOCK_N // 2 if SUBTILE else BLOCK_N0
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b, shape=[K, ldb], strides=[ldb, 1], block_shape=[BLOCK_K, BLOCK_N0])
        c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, c_block])
        if WIDE:
            b_desc1 = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N1])
            c_desc1 = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N1])
    offs_k = tl.arange(0, BLOCK_K)  # (pointer loads)
    if PERSISTENT:
        # one program per SM strides over the tiles; flatten=True lets the compiler pipeline the loads of the next
        # tile under the epilogue of the current one
        num_tiles = num_pid_m * num_pid_n
        dp_tiles = num_tiles
        if STREAM_K:  # whole waves here; the tiles of the last partial wave go to the stream-K phase below
            dp_tiles = num_tiles - num_tiles % num_sms
        # the epilogue derives its tile from a second counter (as upstream does), so no value has to live across
        # the flattened loop from the loads to the stores
        tile_id_c = tl.program_id(0) - num_sms
        for tile_id in tl.range(tl.program_id(0), dp_tiles, num_sms, flatten=True):
            pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, COLUMN_MAJOR)
            acc, acc1 = _k_steps(a_desc, b_desc, b_desc1, offs_k, pid_m, pid_n, M, N, K, 0, k_tiles, BLOCK_M,
                                 BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, WIDE, SWIGLU, GEGLU, False, MEMORY, LOOP_STAGES,
                                 LOOP_UNROLL, WARP_SPECIALIZE)
            tile_id_c += num_sms
            pid_m, pid_n = tile_coords(tile_id_c, num_pid_m, num_pid_n, GROUP_M, COLUMN_MAJOR)
            _store_tile(acc, acc1, c, c_desc, c_desc1, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N, BLOCK_M,
                        BLOCK_N, BLOCK_N0, BLOCK_N1, WIDE, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION, RESIDUAL)
        if STREAM_K:
            # the last num_tiles % num_sms tiles would leave SMs idle as a partial wave; instead their K steps, laid
            # end to end, are dealt out in runs of sk_share steps: program p takes steps [p * sk_share,
            # (p + 1) * sk_share), crossing from one tile into the next as it goes
            sk_steps = (num_tiles - dp_tiles) * k_tiles
            run_lo = tl.program_id(0) * sk_share
            run_hi = tl.minimum(run_lo + sk_share, sk_steps)
            for sk_tile in range(run_lo // k_tiles, tl.cdiv(run_hi, k_tiles)):  # none when run_lo >= sk_steps
                k_lo = tl.maximum(run_lo - sk_tile * k_tiles, 0)
                k_hi = tl.minimum(run_hi - sk_tile * k_tiles, k_tiles)
                pid_m, pid_n = tile_coords(dp_tiles + sk_tile, num_pid_m, num_pid_n, GROUP_M, COLUMN_MAJOR)
                acc, acc1 = _k_steps(a_desc, b_desc, b_desc1, offs_k, pid_m, pid_n, M, N, K, k_lo, k_hi, BLOCK_M,
                                     BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, WIDE, SWIGLU, GEGLU, True, MEMORY,
                                     LOOP_STAGES, LOOP_UNROLL, WARP_SPECIALIZE)
                # the programs whose runs cover this tile, in K order; a tile covered by one is stored directly
                first = sk_tile * k_tiles // sk_share
                parts = ((sk_tile + 1) * k_tiles - 1) // sk_share - first + 1
                if parts == 1:
                    _store_tile(acc, acc1, c, c_desc, c_desc1, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N,
                                BLOCK_M, BLOCK_N, BLOCK_N0, BLOCK_N1, WIDE, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION,
                                RESIDUAL)
                else:
                    _reduce_partials(acc, ws_ptr, counter_ptr, sk_tile * sk_slots, tl.program_id(0) - first, parts,
                                     sk_tile, c, c_desc, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N, BLOCK_M,
                                     BLOCK_N, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION, RESIDUAL)
    elif SPLIT_K > 1:
        # SPLIT_K programs share each output tile; split s takes K steps [s * k_tiles // SPLIT_K,
        # (s + 1) * k_tiles // SPLIT_K): balanced, none empty when SPLIT_K <= k_tiles
        tile_id = tl.program_id(0) // SPLIT_K
        split = tl.program_id(0) % SPLIT_K
        pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M, COLUMN_MAJOR)
        k_lo = split * k_tiles // SPLIT_K
        k_hi = (split + 1) * k_tiles // SPLIT_K
        acc, acc1 = _k_steps(a_desc, b_desc, b_desc1, offs_k, pid_m, pid_n, M, N, K, k_lo, k_hi, BLOCK_M, BLOCK_N,
                             BLOCK_K, BLOCK_N0, BLOCK_N1, WIDE, SWIGLU, GEGLU, True, MEMORY, LOOP_STAGES, LOOP_UNROLL,
                             WARP_SPECIALIZE)
        # publish this program's fp32 partial tile; the tile's last program to arrive writes C
        _reduce_split(acc, ws_ptr, counter_ptr, tile_id, split, c, c_desc, bias_ptr, residual_ptr, scale, pid_m,
                      pid_n, M, N, BLOCK_M, BLOCK_N, SPLIT_K, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION, RESIDUAL)
    else:
        pid_m, pid_n = tile_coords(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M, COLUMN_MAJOR)
        acc, acc1 = _k_steps(a_desc, b_desc, b_desc1, offs_k, pid_m, pid_n, M, N, K, 0, k_tiles, BLOCK_M, BLOCK_N,
                             BLOCK_K, BLOCK_N0, BLOCK_N1, WIDE, SWIGLU, GEGLU, False, MEMORY, LOOP_STAGES, LOOP_UNROLL,
                             WARP_SPECIALIZE)
        _store_tile(acc, acc1, c, c_desc, c_desc1, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N, BLOCK_M,
                    BLOCK_N, BLOCK_N0, BLOCK_N1, WIDE, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION, RESIDUAL)
