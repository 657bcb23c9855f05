"""The end of a Triton GEMM tile (operators/gemm/kernel.py): the fused epilogue in fp32, the store into C, and the
in-kernel reductions of tiles that several programs share along K (split-K, stream-K): each publishes an fp32
partial tile, and the program that arrives last sums them in a fixed order (bitwise repeatable), stores C and
resets its arrival counter (a CUDA graph replays the launch with no zeroing pass).

evo pastes this file below the marker verbatim, before kernel.py, into every Triton GEMM module it renders.
"""

import triton
import triton.language as tl

# ---- evo pastes this file from here on into every module it renders for this family ----

# splits summed by each first-level summer when a tile has more than 2 * SPLIT_GROUP of them: the last program of a
# tile then reads SPLIT_GROUP + SPLIT_K / SPLIT_GROUP partial tiles, not SPLIT_K (24 rather than 128 at 128 splits)
SPLIT_GROUP = tl.constexpr(8)


@triton.jit
def _gelu_tanh(x):
    """GELU's tanh approximation: 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)."""
    return x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))


@triton.jit
def _epilogue(x, pid_m, first_col, bias_ptr, residual_ptr, scale, M, N, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr,
              SCALE: tl.constexpr, BIAS: tl.constexpr, ACTIVATION: tl.constexpr, RESIDUAL: tl.constexpr):
    """The fused epilogue on the fp32 piece `x` of the tile (WIDTH columns from first_col), before the cast; rows
    past M and columns past N read zeros (they are never stored)."""
    if RESIDUAL:
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_ep = first_col + tl.arange(0, WIDTH)
    if SCALE:
        x = x * scale
    if BIAS:
        x += tl.load(bias_ptr + offs_ep, mask=offs_ep < N, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == "gelu":
        x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":
        x = _gelu_tanh(x)
    elif ACTIVATION == "silu":
        x = x * tl.sigmoid(x)
    elif ACTIVATION == "relu":
        x = tl.maximum(x, 0.0)
    if RESIDUAL:
        ep_mask = (offs_cm[:, None] < M) & (offs_ep[None, :] < N)
        x += tl.load(residual_ptr + offs_cm[:, None] * N + offs_ep[None, :], mask=ep_mask, other=0.0).to(tl.float32)
    return x


@triton.jit
def _put(x, c, c_desc, pid_m, first_col, M, N, BLOCK_M: tl.constexpr, WIDTH: tl.constexpr, MEMORY: tl.constexpr):
    """Store the fp32 piece `x` (WIDTH columns from first_col) in C's dtype: by its descriptor, or by pointers with
    rows and columns past the edge masked."""
    if MEMORY == "pointer":
        offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_cn = first_col + tl.arange(0, WIDTH)
        c_ptrs = c + offs_cm[:, None] * N + offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, x.to(c.dtype.element_ty), mask=c_mask)
    elif MEMORY == "descriptor":
        c_desc.store([pid_m * BLOCK_M, first_col], x.to(c.dtype.element_ty))
    else:
        c_desc.store([pid_m * BLOCK_M, first_col], x.to(c_desc.dtype))


@triton.jit
def _store_tile(acc, acc1, c, c_desc, c_desc1, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N0: tl.constexpr, BLOCK_N1: tl.constexpr,
                WIDE: tl.constexpr, SUBTILE: tl.constexpr, MEMORY: tl.constexpr, SCALE: tl.constexpr,
                BIAS: tl.constexpr, ACTIVATION: tl.constexpr, RESIDUAL: tl.constexpr):
    """The epilogue on the fp32 tile at (pid_m, pid_n), then C: in two halves along N (SUBTILE), per column block
    (WIDE: acc and acc1), or whole."""
    first = pid_n * BLOCK_N
    if SUBTILE:
        halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        left, right = tl.split(halves)
        left = _epilogue(left, pid_m, first, bias_ptr, residual_ptr, scale, M, N, BLOCK_M, BLOCK_N // 2, SCALE, BIAS,
                         ACTIVATION, RESIDUAL)
        right = _epilogue(right, pid_m, first + BLOCK_N // 2, bias_ptr, residual_ptr, scale, M, N, BLOCK_M,
                          BLOCK_N // 2, SCALE, BIAS, ACTIVATION, RESIDUAL)
        if MEMORY == "pointer":  # one set of offsets for both halves
            offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_cn = first + tl.arange(0, BLOCK_N // 2)
            c_ptrs = c + offs_cm[:, None] * N + offs_cn[None, :]
            row_ok = offs_cm[:, None] < M
            tl.store(c_ptrs, left.to(c.dtype.element_ty), mask=row_ok & (offs_cn[None, :] < N))
            tl.store(c_ptrs + BLOCK_N // 2, right.to(c.dtype.element_ty),
                     mask=row_ok & (offs_cn[None, :] + BLOCK_N // 2 < N))
        else:
            _put(left, c, c_desc, pid_m, first, M, N, BLOCK_M, BLOCK_N // 2, MEMORY)
            _put(right, c, c_desc, pid_m, first + BLOCK_N // 2, M, N, BLOCK_M, BLOCK_N // 2, MEMORY)
    elif WIDE:
        acc = _epilogue(acc, pid_m, first, bias_ptr, residual_ptr, scale, M, N, BLOCK_M, BLOCK_N0, SCALE, BIAS,
                        ACTIVATION, RESIDUAL)
        acc1 = _epilogue(acc1, pid_m, first + BLOCK_N0, bias_ptr, residual_ptr, scale, M, N, BLOCK_M, BLOCK_N1,
                         SCALE, BIAS, ACTIVATION, RESIDUAL)
        if MEMORY == "pointer":  # one row mask for both blocks
            offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            row_ok = offs_cm[:, None] < M
            offs_cn = first + tl.arange(0, BLOCK_N0)
            tl.store(c + offs_cm[:, None] * N + offs_cn[None, :], acc.to(c.dtype.element_ty),
                     mask=row_ok & (offs_cn[None, :] < N))
            offs_cn1 = first + BLOCK_N0 + tl.arange(0, BLOCK_N1)
            tl.store(c + offs_cm[:, None] * N + offs_cn1[None, :], acc1.to(c.dtype.element_ty),
                     mask=row_ok & (offs_cn1[None, :] < N))
        else:
            _put(acc, c, c_desc, pid_m, first, M, N, BLOCK_M, BLOCK_N0, MEMORY)
            _put(acc1, c, c_desc1, pid_m, first + BLOCK_N0, M, N, BLOCK_M, BLOCK_N1, MEMORY)
    else:
        acc = _epilogue(acc, pid_m, first, bias_ptr, residual_ptr, scale, M, N, BLOCK_M, BLOCK_N, SCALE, BIAS,
                        ACTIVATION, RESIDUAL)
        _put(acc, c, c_desc, pid_m, first, M, N, BLOCK_M, BLOCK_N, MEMORY)


@triton.jit
def _arrive(acc, slots, part, parts, counter_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Publish `acc` as partial `part` of the `parts` slots from `slots` on and count this program in at
    `counter_ptr`: True for the program that arrives last (every partial is then visible to it)."""
    tl.store(slots + part * (BLOCK_M * BLOCK_N), acc)
    # One thread issues the atomic: the barrier puts every thread's partial before it, and acq_rel makes those
    # writes visible to the program that reads them after its own increment.
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr, 1, sem="acq_rel", scope="gpu")
    return arrived == parts - 1


@triton.jit
def _sum_slots(slots, parts, counter_ptr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The sum of the `parts` partial tiles from `slots` on, in slot order (deterministic), by the program that
    arrived last; it resets the arrival counter, so that the next launch (a CUDA graph's replay) needs no zeroing."""
    # .cg reads L2 directly: this SM's L1 must not serve lines other programs have since rewritten. One SM sums
    # every partial, so the sum is bound by how many bytes it keeps in flight: up to 128x128 tiles the loop is
    # software-pipelined (two partials on their way into shared memory, which the finished K loop's ring frees,
    # while a third is added); larger partial tiles would not fit twice, and load one at a time. The order of the
    # additions is the same either way.
    SUM_STAGES: tl.constexpr = 3 if BLOCK_M * BLOCK_N <= 128 * 128 else 1
    total = tl.load(slots, cache_modifier=".cg")
    for s in tl.range(1, parts, num_stages=SUM_STAGES):
        total += tl.load(slots + s * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
    tl.atomic_xchg(counter_ptr, 0, sem="relaxed", scope="gpu")
    return total


@triton.jit
def _tile_slots(ws_ptr, first_slot, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Pointers to the elements of partial-tile slot `first_slot` (64-bit: the workspace may pass 2**31 floats)."""
    offs_tm = tl.arange(0, BLOCK_M)
    offs_tn = tl.arange(0, BLOCK_N)
    slots = ws_ptr + first_slot.to(tl.int64) * (BLOCK_M * BLOCK_N)
    return slots + offs_tm[:, None] * BLOCK_N + offs_tn[None, :]


@triton.jit
def _reduce_partials(acc, ws_ptr, counter_ptr, first_slot, part, parts, counter, c, c_desc, bias_ptr, residual_ptr,
                     scale, pid_m, pid_n, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SUBTILE: tl.constexpr,
                     MEMORY: tl.constexpr, SCALE: tl.constexpr, BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                     RESIDUAL: tl.constexpr):
    """Publish `acc` as partial `part` of the `parts` that make one tile (slots from `first_slot` on, arrival
    counter `counter`); the program that arrives last sums them in part order, stores C and resets the counter."""
    slots = _tile_slots(ws_ptr, first_slot, BLOCK_M, BLOCK_N)
    last = _arrive(acc, slots, part, parts, counter_ptr + counter, BLOCK_M, BLOCK_N)
    if last:
        total = _sum_slots(slots, parts, counter_ptr + counter, BLOCK_M, BLOCK_N)
        _store_tile(total, total, c, c_desc, c_desc, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N, BLOCK_M,
                    BLOCK_N, BLOCK_N, 0, False, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION, RESIDUAL)


@triton.jit
def _reduce_split(acc, ws_ptr, counter_ptr, tile_id, split, c, c_desc, bias_ptr, residual_ptr, scale, pid_m, pid_n,
                  M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT_K: tl.constexpr, SUBTILE: tl.constexpr,
                  MEMORY: tl.constexpr, SCALE: tl.constexpr, BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                  RESIDUAL: tl.constexpr):
    """Split-K's reduction of tile `tile_id` in the kernel, `acc` being split `split`'s partial. Up to
    2 * SPLIT_GROUP splits: the last to arrive sums them all. Beyond: the last of each group of SPLIT_GROUP splits
    sums its group into a group slot (while other groups still run their K loops), and the last of those summers
    sums the group slots and stores C. Either way each sum runs in a fixed order (bitwise repeatable). A tile owns
    SPLIT_K (+ GROUPS) slots and 1 (+ GROUPS) counters (plan.split_workspace)."""
    if SPLIT_K > 2 * SPLIT_GROUP:
        GROUPS: tl.constexpr = (SPLIT_K + SPLIT_GROUP - 1) // SPLIT_GROUP
        group = split // SPLIT_GROUP
        first = group * SPLIT_GROUP
        slots = _tile_slots(ws_ptr, tile_id * (SPLIT_K + GROUPS) + first, BLOCK_M, BLOCK_N)
        counters = counter_ptr + tile_id * (GROUPS + 1)
        in_group = tl.minimum(SPLIT_GROUP, SPLIT_K - first)
        if _arrive(acc, slots, split - first, in_group, counters + group, BLOCK_M, BLOCK_N):
            total = _sum_slots(slots, in_group, counters + group, BLOCK_M, BLOCK_N)
            _reduce_partials(total, ws_ptr, counters, tile_id * (SPLIT_K + GROUPS) + SPLIT_K, group, GROUPS,
                             GROUPS, c, c_desc, bias_ptr, residual_ptr, scale, pid_m, pid_n, M, N, BLOCK_M,
                             BLOCK_N, SUBTILE, MEMORY, SCALE, BIAS, ACTIVATION, RESIDUAL)
    else:
        _reduce_partials(acc, ws_ptr, counter_ptr, tile_id * SPLIT_K, split, SPLIT_K, tile_id, c, c_desc, bias_ptr,
                         residual_ptr, scale, pid_m, pid_n, M, N, BLOCK_M, BLOCK_N, SUBTILE, MEMORY, SCALE, BIAS,
                         ACTIVATION, RESIDUAL)
