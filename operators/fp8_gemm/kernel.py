"""The FP8 GEMM: y[M, N] = (a[M, K] @ W[N, K]^T) scaled, a and W float8_e4m3fn, fp32 accumulation, y in bf16 or fp16,
W in nn.Linear's [out, in] layout read in place (both operands K-major: the layout Hopper's FP8 tensor cores take).

The kernel and its launch plan, as one real module: evo renders a module for a genome by writing a header (the
genome's constants and the entry function) and pasting this file below the marker verbatim, so the code a search
measured and a user exports is this file.

The scales, as FP8 checkpoints ship them (float32):
- per tensor: a_scale and w_scale of one element each, applied to the fp32 tile before the cast;
- per channel: w_scale[N] per output channel, a_scale[M] per row (a token's dynamic scale) or one for all rows;
- block (DeepSeek-V3): w_scale[ceil(N / 128), K / 128] per 128x128 block of W, a_scale[M, K / 128] per 1x128 group of
  a row; each K step (at most 128 wide: within one group) is a fresh product scaled into the fp32 accumulator.
Structure switches (constexpr):
- SWAP_AB: the tile is computed as W_tile @ a_tile^T ([BLOCK_N, BLOCK_M]), W's rows on the MMA's wide side, for a
  few rows of a (decode); stored transposed;
- PROMOTE: each K step's product is added into the fp32 accumulator (tl.dot's max_num_imprecise_acc = BLOCK_K), as
  Hopper's FP8 MMA otherwise accumulates all of K with fewer mantissa bits;
- GROUP_M: tiles run in groups of GROUP_M rows of tiles walking the columns together (W tiles reused from L2);
- PERSISTENT: a grid of CONFIG["PROGRAMS"] programs (a few per SM) walks the (tile, split) work items, the loop
  flattened so that the next item's loads start under the current one's epilogue; else one program per item;
- SPLIT_K > 1: each program publishes its fp32 partial tile into its own workspace slot and counts itself in; the
  last to arrive sums the slots in split order (deterministic), scales, stores y and zeroes the counter for the next
  launch (a CUDA graph replays it with no extra kernels).
- MEMORY "descriptor": a and W through tensor descriptors made in the kernel (TMA on Hopper; K a multiple of 16),
  else pointer loads, rows of a past M and of W past N reading the last row again (never stored: no row masks).
"""

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel

# ---- evo pastes this file from here on into every module it renders for this family ----

SCALE_BLOCK = 128  # the block scales' width along K and height along N
OUT_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of program `pid`: groups of GROUP_M rows of tiles, each group walking the columns together."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    if GROUP_M == 1:
        pid_m = pid // tiles_n
        pid_n = pid % tiles_n
    else:
        per_group = GROUP_M * tiles_n
        first_m = (pid // per_group) * GROUP_M
        rows = tl.minimum(tiles_m - first_m, GROUP_M)
        local = pid % per_group
        pid_m = first_m + local % rows
        pid_n = local // rows
    return pid_m, pid_n


@triton.jit
def _product(a_rows, w_rows, m0, n0, as_rows, ws_rows, k_lo, K: tl.constexpr, CHUNK: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_K: tl.constexpr,
             TMA: tl.constexpr, SWAP_AB: tl.constexpr, PROMOTE: tl.constexpr, BLOCK_SCALES: tl.constexpr,
             W_SCALE_ONE: tl.constexpr, SCALE_BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr):
    """The fp32 tile over K in [k_lo, k_lo + CHUNK): [BLOCK_M, BLOCK_N], or [BLOCK_N, BLOCK_M] with SWAP_AB; with
    BLOCK_SCALES each step's product already scaled by its group's scales (as_rows: each row's scale row, ws_rows:
    the scale row of each W row's block, or of the tile's one block with W_SCALE_ONE). a_rows and w_rows are the
    tile's row pointers, or with TMA tensor descriptors of a and W read at rows m0 and n0 (zeros past the edges)."""
    offs_k = tl.arange(0, BLOCK_K)
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in tl.range(k_lo, k_lo + CHUNK, BLOCK_K, num_stages=NUM_STAGES):
        ks = k + offs_k
        if TMA:
            a = a_rows.load([m0, k])
            w = w_rows.load([n0, k])
        elif MASK_K:
            a = tl.load(a_rows + ks[None, :], mask=(ks < K)[None, :], other=0.0)
            w = tl.load(w_rows + ks[None, :], mask=(ks < K)[None, :], other=0.0)
        else:
            a = tl.load(a_rows + ks[None, :])
            w = tl.load(w_rows + ks[None, :])
        if BLOCK_SCALES:
            # a split's last chunk may run whole steps past K (their a and W read as zeros): their scales are the
            # last group's, never a read past the scale rows (0 x an unread NaN is NaN)
            group = tl.minimum(k // SCALE_BLOCK, K // SCALE_BLOCK - 1)
            sa = tl.load(as_rows + group)  # [BLOCK_M]
            sw = tl.load(ws_rows + group)  # [BLOCK_N], or the tile's one scale
            if SWAP_AB:
                part = tl.dot(w, tl.trans(a)) * sa[None, :]
                if W_SCALE_ONE:
                    acc += part * sw
                else:
                    acc += part * sw[:, None]
            else:
                part = tl.dot(a, tl.trans(w)) * sa[:, None]
                if W_SCALE_ONE:
                    acc += part * sw
                else:
                    acc += part * sw[None, :]
        elif PROMOTE:
            if SWAP_AB:
                acc = tl.dot(w, tl.trans(a), acc, max_num_imprecise_acc=BLOCK_K)
            else:
                acc = tl.dot(a, tl.trans(w), acc, max_num_imprecise_acc=BLOCK_K)
        elif SWAP_AB:
            acc = tl.dot(w, tl.trans(a), acc)
        else:
            acc = tl.dot(a, tl.trans(w), acc)
    return acc


@triton.jit
def _scale_and_store(acc, y_ptr, as_ptr, ws_ptr, rows_m, rows_n, last_m, last_n, M, N, SWAP_AB: tl.constexpr,
                     BLOCK_SCALES: tl.constexpr, A_PER_ROW: tl.constexpr, W_PER_ROW: tl.constexpr):
    """The per-tensor or per-channel scales on the fp32 tile (the block scales were applied per step), then y in y's
    dtype."""
    out = acc
    if not BLOCK_SCALES:
        if A_PER_ROW:
            sa = tl.load(as_ptr + last_m)
            if SWAP_AB:
                out = out * sa[None, :]
            else:
                out = out * sa[:, None]
        else:
            out = out * tl.load(as_ptr)
        if W_PER_ROW:
            sw = tl.load(ws_ptr + last_n)
            if SWAP_AB:
                out = out * sw[:, None]
            else:
                out = out * sw[None, :]
        else:
            out = out * tl.load(ws_ptr)
    if SWAP_AB:
        offs = rows_m.to(tl.int64)[None, :] * N + rows_n[:, None]
        mask = (rows_m < M)[None, :] & (rows_n < N)[:, None]
    else:
        offs = rows_m.to(tl.int64)[:, None] * N + rows_n[None, :]
        mask = (rows_m < M)[:, None] & (rows_n < N)[None, :]
    tl.store(y_ptr + offs, out.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _work_item(a_src, w_src, y_ptr, as_ptr, ws_ptr, slots_ptr, count_ptr, pid, pid_k, M, N, K: tl.constexpr,
               GROUPS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, CHUNK: tl.constexpr, MASK_K: tl.constexpr,
               SWAP_AB: tl.constexpr, PROMOTE: tl.constexpr, BLOCK_SCALES: tl.constexpr, A_PER_ROW: tl.constexpr,
               W_PER_ROW: tl.constexpr, SCALE_BLOCK: tl.constexpr, TMA: tl.constexpr, NUM_STAGES: tl.constexpr):
    """Split pid_k of output tile pid: its product over its share of K, stored (or published, the last split to
    arrive summing the tile's partials and storing). a_src and w_src: a's and W's pointers, or with TMA their
    tensor descriptors."""
    pid_m, pid_n = _tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rows_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    last_m = tl.minimum(rows_m, M - 1)
    last_n = tl.minimum(rows_n, N - 1)
    if TMA:
        a_rows = a_src
        w_rows = w_src
    else:
        a_rows = a_src + last_m.to(tl.int64)[:, None] * K
        w_rows = w_src + last_n.to(tl.int64)[:, None] * K
    # block scales: a_scale[M, GROUPS] row by row; w_scale[ceil(N / 128), GROUPS], one row per 128 rows of W
    as_rows = as_ptr + last_m * GROUPS
    W_SCALE_ONE: tl.constexpr = BLOCK_N <= SCALE_BLOCK  # a power-of-two tile of W lies within one block
    if W_SCALE_ONE:
        ws_rows = ws_ptr + (pid_n * BLOCK_N // SCALE_BLOCK) * GROUPS
    else:
        ws_rows = ws_ptr + (last_n // SCALE_BLOCK) * GROUPS
    acc = _product(a_rows, w_rows, pid_m * BLOCK_M, pid_n * BLOCK_N, as_rows, ws_rows, pid_k * CHUNK, K, CHUNK, BLOCK_M,
                   BLOCK_N, BLOCK_K, MASK_K, TMA, SWAP_AB, PROMOTE, BLOCK_SCALES, W_SCALE_ONE, SCALE_BLOCK, NUM_STAGES)
    if SPLIT_K == 1:
        _scale_and_store(acc, y_ptr, as_ptr, ws_ptr, rows_m, rows_n, last_m, last_n, M, N, SWAP_AB, BLOCK_SCALES,
                         A_PER_ROW, W_PER_ROW)
    else:
        TILE: tl.constexpr = BLOCK_M * BLOCK_N
        tile = pid_m * tl.cdiv(N, BLOCK_N) + pid_n
        slots = slots_ptr + tile.to(tl.int64) * (SPLIT_K * TILE)  # the tile's SPLIT_K slots, one per split
        if SWAP_AB:
            at = tl.arange(0, BLOCK_N)[:, None] * BLOCK_M + tl.arange(0, BLOCK_M)[None, :]
        else:
            at = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        tl.store(slots + pid_k * TILE + at, acc)
        # One thread issues the count: the barrier puts every thread's partial before it, and acq_rel makes those
        # writes visible to the program that reads them after its own increment.
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.load(slots + at, cache_modifier=".cg")  # .cg reads L2: not lines this SM's L1 kept
            for s in range(1, SPLIT_K):
                total += tl.load(slots + s * TILE + at, cache_modifier=".cg")
            _scale_and_store(total, y_ptr, as_ptr, ws_ptr, rows_m, rows_n, last_m, last_n, M, N, SWAP_AB,
                             BLOCK_SCALES, A_PER_ROW, W_PER_ROW)
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # counted from zero by the next launch


@triton.jit
def fp8_gemm_kernel(a_ptr, w_ptr, y_ptr, as_ptr, ws_ptr, slots_ptr, count_ptr, M, N,
                    K: tl.constexpr, GROUPS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr, CHUNK: tl.constexpr,
                    MASK_K: tl.constexpr, SWAP_AB: tl.constexpr, PROMOTE: tl.constexpr, BLOCK_SCALES: tl.constexpr,
                    A_PER_ROW: tl.constexpr, W_PER_ROW: tl.constexpr, SCALE_BLOCK: tl.constexpr, TMA: tl.constexpr,
                    PERSISTENT: tl.constexpr, NUM_STAGES: tl.constexpr):
    if TMA:  # tensor descriptors made here (TMA on Hopper): reads past the edges return zeros
        a_src = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        w_src = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    else:
        a_src = a_ptr
        w_src = w_ptr
    if PERSISTENT:  # a grid of a few programs per SM walks the (tile, split) items, split fastest
        items = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N) * SPLIT_K
        for item in tl.range(tl.program_id(0), items, tl.num_programs(0), flatten=True):
            _work_item(a_src, w_src, y_ptr, as_ptr, ws_ptr, slots_ptr, count_ptr, item // SPLIT_K, item % SPLIT_K, M,
                       N, K, GROUPS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, CHUNK, MASK_K, SWAP_AB, PROMOTE,
                       BLOCK_SCALES, A_PER_ROW, W_PER_ROW, SCALE_BLOCK, TMA, NUM_STAGES)
    else:
        _work_item(a_src, w_src, y_ptr, as_ptr, ws_ptr, slots_ptr, count_ptr, tl.program_id(0), tl.program_id(1), M,
                   N, K, GROUPS, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, SPLIT_K, CHUNK, MASK_K, SWAP_AB, PROMOTE,
                   BLOCK_SCALES, A_PER_ROW, W_PER_ROW, SCALE_BLOCK, TMA, NUM_STAGES)


def _described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def _one_row_of(t, n):
    """Whether `t` holds n values along at most one dimension: (n,), (n, 1), (1, n), and for n = 1 any shape of one
    element."""
    return t.numel() == n and sum(s != 1 for s in t.shape) <= 1


def _check_scales(a, a_scale, w_scale, m, n, k, scales):
    """ValueError naming the scale that does not fit the scale mode `scales` (float32, the right shape)."""
    for name, t in (("a_scale", a_scale), ("w_scale", w_scale)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.float32 or t.device != a.device:
            raise ValueError(f"{name} must be a float32 tensor on {a.device}; got {_described(t)}")
    if scales == "tensor":
        for name, t in (("a_scale", a_scale), ("w_scale", w_scale)):
            if t.numel() != 1:
                raise ValueError(f"{name} must hold one scale (per-tensor scales); got {_described(t)}")
    elif scales == "channel":
        if not (_one_row_of(a_scale, m) or a_scale.numel() == 1):
            raise ValueError(f"a_scale must hold one scale per row of a ({m},) or one for all rows (per-channel "
                             f"scales); got {_described(a_scale)}")
        if not _one_row_of(w_scale, n):
            raise ValueError(f"w_scale must hold one scale per output channel ({n},) (per-channel scales); got "
                             f"{_described(w_scale)}")
    else:
        groups = k // SCALE_BLOCK
        if a_scale.shape not in ((*a.shape[:-1], groups), (m, groups)):
            raise ValueError(f"a_scale must be [{m}, {groups}] (a scale per row and 1x{SCALE_BLOCK} group of K); got "
                             f"{_described(a_scale)}")
        blocks = (triton.cdiv(n, SCALE_BLOCK), groups)
        if tuple(w_scale.shape) != blocks:
            raise ValueError(f"w_scale must be [{blocks[0]}, {blocks[1]}] (a scale per {SCALE_BLOCK}x{SCALE_BLOCK} "
                             f"block of W[{n}, {k}]); got {_described(w_scale)}")


def fp8_gemm_plan(a, weight, a_scale, w_scale, out, out_dtype, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid, workspace and the bound kernel. Returns run(a, weight, a_scale, w_scale, out) for every call of this
    signature. y is in `out_dtype`, else out's dtype, else the module's (config["OUT_DTYPE"]). `config` holds the
    genome's constants (the rendered module's CONFIG). The workspace belongs to the plan, like cuBLAS's: one stream
    at a time."""
    fp8 = torch.float8_e4m3fn
    if not isinstance(a, torch.Tensor) or a.dtype != fp8 or a.dim() == 0 or a.shape[-1] == 0:
        raise ValueError(f"a must be a float8_e4m3fn tensor [..., K] with K > 0; got {_described(a)}")
    k = a.shape[-1]
    if (not isinstance(weight, torch.Tensor) or weight.dtype != fp8 or weight.dim() != 2 or weight.shape[1] != k
            or weight.device != a.device):
        raise ValueError(f"weight must be a float8_e4m3fn tensor [N, K] (nn.Linear's layout) with K={k} on "
                         f"{a.device}; got {_described(weight)}")
    scales = config["SCALES"]
    if scales == "block" and k % SCALE_BLOCK:
        raise ValueError(f"K={k} (a's last dimension) is not a multiple of {SCALE_BLOCK}: block scales cover whole "
                         f"1x{SCALE_BLOCK} groups of K")
    n, m = weight.shape[0], a.numel() // k
    shape = (*a.shape[:-1], n)
    _check_scales(a, a_scale, w_scale, m, n, k, scales)
    if out_dtype is not None and out_dtype not in OUT_DTYPES.values():
        raise ValueError(f"out_dtype must be torch.bfloat16, torch.float16 or torch.float32; got {out_dtype!r}")
    if out is not None:
        if (not isinstance(out, torch.Tensor) or out.shape != shape or out.dtype not in OUT_DTYPES.values()
                or out.device != a.device or not out.is_contiguous()):
            raise ValueError(f"out must be a contiguous bfloat16, float16 or float32 tensor of shape {shape} on "
                             f"{a.device}; got {_described(out)}")
        if out_dtype is not None and out.dtype != out_dtype:
            raise ValueError(f"out is {out.dtype} but out_dtype is {out_dtype}: give one, or both alike")
        out_dtype = out.dtype
    out_dtype = out_dtype or OUT_DTYPES[config["OUT_DTYPE"]]
    block_m, block_n, block_k, split = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["SPLIT_K"]
    chunk = triton.cdiv(triton.cdiv(k, split), block_k) * block_k  # K per split, whole steps
    tiles = triton.cdiv(m, block_m) * triton.cdiv(n, block_n)
    # without a split the kernel touches neither: each call's a stands in for them (a plan keeps no caller's tensor)
    workspace = counters = None
    if split > 1:
        workspace = torch.empty(tiles * split * block_m * block_n, dtype=torch.float32, device=a.device)
        counters = torch.zeros(tiles, dtype=torch.int32, device=a.device)
    contiguous = all(t.is_contiguous() for t in (a, weight, a_scale, w_scale))
    tma = config["MEMORY"] == "descriptor"
    # (operands that are not contiguous are copied per call, into fresh aligned memory)
    if tma and (k % 16 or contiguous and (a.data_ptr() % 16 or weight.data_ptr() % 16)):
        raise ValueError(f"tensor descriptors (memory=descriptor) need a and weight at 16-byte aligned addresses with "
                         f"rows of 16-byte multiples; K={k}")
    programs = config["PROGRAMS"]  # persistent: a few programs per SM (never more than the work items)
    grid = (min(programs, tiles * split),) if programs else (tiles, split)
    kernel = BoundKernel(fp8_gemm_kernel, grid,
                         {"num_warps": config["NUM_WARPS"], "num_stages": config["NUM_STAGES"]}, scratch=tma)
    consts = (k, k // SCALE_BLOCK, block_m, block_n, block_k, config["GROUP_M"], split, chunk, split * chunk != k,
              config["SWAP_AB"], config["PROMOTE"], scales == "block", scales == "block" or a_scale.numel() > 1,
              scales != "tensor", SCALE_BLOCK, tma, bool(programs), config["NUM_STAGES"])

    def run(a, weight, a_scale, w_scale, out):
        if not contiguous:  # each call copies into contiguous rows first
            a, weight, a_scale, w_scale = (t.contiguous() for t in (a, weight, a_scale, w_scale))
        y = torch.empty(shape, dtype=out_dtype, device=a.device) if out is None else out
        if m and n:
            kernel(a, weight, y, a_scale, w_scale, a if workspace is None else workspace,
                   a if counters is None else counters, m, n, *consts)
        return y

    run.kernel = kernel  # for inspection
    run.workspace = (workspace, counters) if split > 1 else None
    return run
