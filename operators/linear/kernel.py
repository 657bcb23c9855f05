"""The decode GEMM: y[M, N] = x[M, K] @ W[N, K]^T for a few rows (M <= 16), W in nn.Linear's [out, in] layout read in
place, with the K reduction split over programs so that every SM streams its share of the weight.

The kernel and its launch plan, as one real module: evo renders a module for a genome by writing a header (the
genome's constants and the entry function) and pasting this file below the marker verbatim, so the code a search
measured and a user exports is this file.

A program owns BLOCK_N rows of W (output columns) for BLOCK_M rows of x and walks one CHUNK of K (its split) in
BLOCK_K steps; loads run along K, W's contiguous axis, in 16-byte vectors. Structure switches (constexpr):
- DOT: the product on tensor cores, tl.dot(W tile, x tile^T) with x's rows padded to 16 (W is the MMA's wide side),
  or else FMA: the [BLOCK_N, BLOCK_M, BLOCK_K] product on CUDA cores, reduced over K every step or, with
  REDUCE_AT_END, kept as per-lane sums until the end (fewer shuffles, more registers; for M = 1..4);
- SPLIT_K > 1: each program publishes its fp32 partial tile into a workspace (atomic adds into one slot, or with
  ORDERED its own slot, summed in split order: deterministic) and counts itself in; the last to arrive reads the
  total from L2, applies the epilogue, stores y and leaves workspace and counter zeroed for the next launch (so a
  CUDA graph replays it with no extra kernels);
- NORM: y = rmsnorm(x) @ W^T, each program recomputing its rows' inverse RMS over all of K first (cheap for a few
  rows), the normed rows rounded to x's dtype as an eager RMSNorm's output is;
- BIAS: y += bias[N]; RESIDUAL: then y += residual[M, N]; SWIGLU: W is the merged [2N, K] gate-up weight (the
  gate's N rows, then the up projection's) and y = silu(x @ Wg^T) * (x @ Wu^T); GEGLU: the same with the tanh
  approximation of GELU as the gate (Gemma's gelu_pytorch_tanh), y = gelu_tanh(x @ Wg^T) * (x @ Wu^T).
"""

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel

# ---- evo pastes this file from here on into every module it renders for this family ----


@triton.jit
def _inverse_rms(x_rows, m_ok, eps, K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """rsqrt(mean(x^2) + eps) of each of the program's rows of x, over all of K."""
    offs_k = tl.arange(0, BLOCK_K)
    squares = tl.zeros([BLOCK_M, BLOCK_K], dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K):
        ks = k + offs_k
        x = tl.load(x_rows + ks[None, :], mask=m_ok[:, None] & (ks < K)[None, :], other=0.0).to(tl.float32)
        squares += x * x
    return tl.rsqrt(tl.sum(squares, axis=1) / K + eps)


@triton.jit
def _x_tile(x_rows, m_ok, nw_ptr, rstd, ks, K: tl.constexpr, MASK_K: tl.constexpr, NORM: tl.constexpr):
    """[BLOCK_M, BLOCK_K] of x at columns ks, normed when NORM, in x's dtype; rows past M are zeros, never read
    (x padded to 16 rows for tl.dot costs no loads)."""
    if MASK_K:
        x = tl.load(x_rows + ks[None, :], mask=m_ok[:, None] & (ks < K)[None, :], other=0.0)
    else:
        x = tl.load(x_rows + ks[None, :], mask=m_ok[:, None], other=0.0)
    if NORM:
        if MASK_K:
            nw = tl.load(nw_ptr + ks, mask=ks < K, other=0.0)
        else:
            nw = tl.load(nw_ptr + ks)
        x = (x.to(tl.float32) * rstd[:, None] * nw.to(tl.float32)[None, :]).to(x.dtype)
    return x


@triton.jit
def _w_tile(w_rows, ks, K: tl.constexpr, MASK_K: tl.constexpr, EVICT_W: tl.constexpr):
    """[BLOCK_N, BLOCK_K] of W at columns ks (each weight byte is read once: EVICT_W may say so)."""
    if MASK_K:
        w = tl.load(w_rows + ks[None, :], mask=(ks < K)[None, :], other=0.0, eviction_policy=EVICT_W)
    else:
        w = tl.load(w_rows + ks[None, :], eviction_policy=EVICT_W)
    return w


@triton.jit
def _partial(x_rows, m_ok, w_rows, nw_ptr, rstd, k_lo, K: tl.constexpr, CHUNK: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_K: tl.constexpr, NORM: tl.constexpr,
             DOT: tl.constexpr, REDUCE_AT_END: tl.constexpr, NUM_STAGES: tl.constexpr, EVICT_W: tl.constexpr):
    """The fp32 [BLOCK_N, BLOCK_M] product of the program's W rows and x rows over K in [k_lo, k_lo + CHUNK)."""
    offs_k = tl.arange(0, BLOCK_K)
    if DOT:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for k in tl.range(k_lo, k_lo + CHUNK, BLOCK_K, num_stages=NUM_STAGES):
            ks = k + offs_k
            w = _w_tile(w_rows, ks, K, MASK_K, EVICT_W)
            x = _x_tile(x_rows, m_ok, nw_ptr, rstd, ks, K, MASK_K, NORM)
            acc = tl.dot(w, tl.trans(x), acc)
    elif REDUCE_AT_END:
        lanes = tl.zeros([BLOCK_N, BLOCK_M, BLOCK_K], dtype=tl.float32)
        for k in tl.range(k_lo, k_lo + CHUNK, BLOCK_K, num_stages=NUM_STAGES):
            ks = k + offs_k
            w = _w_tile(w_rows, ks, K, MASK_K, EVICT_W).to(tl.float32)
            x = _x_tile(x_rows, m_ok, nw_ptr, rstd, ks, K, MASK_K, NORM).to(tl.float32)
            lanes += w[:, None, :] * x[None, :, :]
        acc = tl.sum(lanes, axis=2)
    else:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for k in tl.range(k_lo, k_lo + CHUNK, BLOCK_K, num_stages=NUM_STAGES):
            ks = k + offs_k
            w = _w_tile(w_rows, ks, K, MASK_K, EVICT_W).to(tl.float32)
            x = _x_tile(x_rows, m_ok, nw_ptr, rstd, ks, K, MASK_K, NORM).to(tl.float32)
            acc += tl.sum(w[:, None, :] * x[None, :, :], axis=2)
    return acc


@triton.jit
def _store(acc, up, y_ptr, res_ptr, b_ptr, rows_m, rows_n, M, N, BIAS: tl.constexpr, RESIDUAL: tl.constexpr,
           SWIGLU: tl.constexpr, GEGLU: tl.constexpr):
    """The epilogue on the fp32 [BLOCK_N, BLOCK_M] tile, then y[m, n] in y's dtype."""
    offs = rows_m.to(tl.int64)[None, :] * N + rows_n[:, None]
    mask = (rows_m < M)[None, :] & (rows_n < N)[:, None]
    out = acc
    if SWIGLU:
        out = acc * tl.sigmoid(acc) * up
    if GEGLU:  # 0.5 g (1 + tanh(z)) = g sigmoid(2z), z = sqrt(2 / pi) (g + 0.044715 g^3)
        out = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)) * up
    if BIAS:
        out += tl.load(b_ptr + rows_n, mask=rows_n < N, other=0.0).to(tl.float32)[:, None]
    if RESIDUAL:
        out += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, out.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _total(slots, at, keep, SPLIT_K: tl.constexpr, TILE: tl.constexpr, ORDERED: tl.constexpr):
    """The sum of a tile's published partials: SPLIT_K slots summed in split order when ORDERED, else the one slot
    of the atomic adds, zeroed again.
    .cg reads L2: this SM's L1 must not serve lines other programs wrote since."""
    total = tl.load(slots + at, mask=keep, other=0.0, cache_modifier=".cg")
    if ORDERED:
        for s in range(1, SPLIT_K):
            total += tl.load(slots + s * TILE + at, mask=keep, other=0.0, cache_modifier=".cg")
    else:
        tl.store(slots + at, tl.zeros_like(total), mask=keep)
    return total


@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, res_ptr, nw_ptr, b_ptr, ws_ptr, count_ptr, M, N, eps,
                  K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  SPLIT_K: tl.constexpr, CHUNK: tl.constexpr, MASK_K: tl.constexpr, DOT: tl.constexpr,
                  REDUCE_AT_END: tl.constexpr, ORDERED: tl.constexpr, NORM: tl.constexpr, BIAS: tl.constexpr,
                  RESIDUAL: tl.constexpr, SWIGLU: tl.constexpr, GEGLU: tl.constexpr, NUM_STAGES: tl.constexpr,
                  EVICT_W: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    rows_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rows_m < M
    # W's rows past N read the last row again and are never stored: W's loads need no row mask
    last_n = tl.minimum(rows_n, N - 1)
    x_rows = x_ptr + rows_m.to(tl.int64)[:, None] * K
    w_rows = w_ptr + last_n.to(tl.int64)[:, None] * K
    rstd = tl.full([BLOCK_M], 1.0, dtype=tl.float32)
    if NORM:
        rstd = _inverse_rms(x_rows, m_ok, eps, K, BLOCK_M, BLOCK_K)
    k_lo = pid_k * CHUNK
    acc = _partial(x_rows, m_ok, w_rows, nw_ptr, rstd, k_lo, K, CHUNK, BLOCK_M, BLOCK_N, BLOCK_K, MASK_K, NORM, DOT,
                   REDUCE_AT_END, NUM_STAGES, EVICT_W)
    up = acc
    if SWIGLU or GEGLU:  # the up projection's rows follow the gate's N rows
        up_rows = w_ptr + (last_n + N).to(tl.int64)[:, None] * K
        up = _partial(x_rows, m_ok, up_rows, nw_ptr, rstd, k_lo, K, CHUNK, BLOCK_M, BLOCK_N, BLOCK_K, MASK_K, NORM, DOT,
                      REDUCE_AT_END, NUM_STAGES, EVICT_W)
    if SPLIT_K == 1:
        _store(acc, up, y_ptr, res_ptr, b_ptr, rows_m, rows_n, M, N, BIAS, RESIDUAL, SWIGLU, GEGLU)
    else:
        tile = pid_m * tl.num_programs(0) + pid_n
        slots = SPLIT_K if ORDERED else 1  # per accumulator of a tile, each BLOCK_M * BLOCK_N values
        gate_slots = ws_ptr + tile.to(tl.int64) * ((2 if SWIGLU or GEGLU else 1) * slots * BLOCK_M * BLOCK_N)
        up_slots = gate_slots + slots * BLOCK_M * BLOCK_N
        # a slot is [BLOCK_M, BLOCK_N], row m's partials contiguous: padded rows of x are neither written nor read
        at = tl.arange(0, BLOCK_M)[None, :] * BLOCK_N + tl.arange(0, BLOCK_N)[:, None]
        keep = m_ok[None, :] & (rows_n >= 0)[:, None]
        if ORDERED:
            tl.store(gate_slots + pid_k * (BLOCK_M * BLOCK_N) + at, acc, mask=keep)
            if SWIGLU or GEGLU:
                tl.store(up_slots + pid_k * (BLOCK_M * BLOCK_N) + at, up, mask=keep)
        else:
            tl.atomic_add(gate_slots + at, acc, mask=keep, sem="relaxed", scope="gpu")
            if SWIGLU or GEGLU:
                tl.atomic_add(up_slots + at, up, mask=keep, sem="relaxed", scope="gpu")
        # One thread issues the count: the barrier puts every thread's partial before it, and acq_rel makes those
        # writes visible to the program that reads them after its own increment.
        tl.debug_barrier()
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = _total(gate_slots, at, keep, SPLIT_K, BLOCK_M * BLOCK_N, ORDERED)
            total_up = total
            if SWIGLU or GEGLU:
                total_up = _total(up_slots, at, keep, SPLIT_K, BLOCK_M * BLOCK_N, ORDERED)
            _store(total, total_up, y_ptr, res_ptr, b_ptr, rows_m, rows_n, M, N, BIAS, RESIDUAL, SWIGLU,
                   GEGLU)
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")  # counted from zero by the next launch


def _described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def linear_plan(x, weight, norm_weight, bias, residual, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid, workspace and the bound kernel. Returns run(x, weight, norm_weight, bias, residual, out, eps) for every call
    of this signature. `config` holds the genome's constants (the rendered module's CONFIG). The workspace belongs to
    the plan, like cuBLAS's: one stream at a time."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must be a tensor with rows of at least one element; got {_described(x)}")
    k = x.shape[-1]
    parts = 2 if config["SWIGLU"] or config["GEGLU"] else 1
    if (not isinstance(weight, torch.Tensor) or weight.dim() != 2 or weight.shape[1] != k
            or weight.shape[0] % parts or weight.dtype != x.dtype or weight.device != x.device):
        form = "[2N, K] (gate rows, then up rows)" if parts == 2 else "[N, K] (nn.Linear's layout)"
        raise ValueError(f"weight must be {form} with K={k}, of x's dtype and device; got {_described(weight)}")
    n = weight.shape[0] // parts
    m = x.numel() // k
    shape = (*x.shape[:-1], n)
    if config["NORM"] and (not isinstance(norm_weight, torch.Tensor) or norm_weight.shape != (k,)
                           or norm_weight.device != x.device):
        raise ValueError(f"norm_weight must have shape ({k},) on {x.device}; got {_described(norm_weight)}")
    if config["BIAS"] and (not isinstance(bias, torch.Tensor) or bias.shape != (n,) or bias.device != x.device):
        raise ValueError(f"bias must have shape ({n},) on {x.device}; got {_described(bias)}")
    if config["RESIDUAL"] and (not isinstance(residual, torch.Tensor) or residual.shape != shape
                               or residual.dtype != x.dtype or residual.device != x.device):
        raise ValueError(f"residual must have shape {shape} in x's dtype and device; got {_described(residual)}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != shape or out.dtype != x.dtype
                            or out.device != x.device or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous tensor of shape {shape} in x's dtype and device")
    block_m, block_n, block_k, split = config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["SPLIT_K"]
    chunk = triton.cdiv(triton.cdiv(k, split), block_k) * block_k  # K per split, whole steps
    tiles_n, blocks_m = triton.cdiv(n, block_n), triton.cdiv(m, block_m)
    # without a split the kernel touches neither: each call's x stands in for them. Never the first call's x kept
    # here: a plan that held it would keep an activation alive (under CUDA-graph trees, one inside the graph's pool
    # that no output tracks: "tensor(s) in the cudagraph pool not tracked as outputs")
    workspace = counters = None
    if split > 1:
        slots = (split if config["ORDERED"] else 1) * parts
        workspace = torch.zeros(tiles_n * blocks_m * slots * block_m * block_n, dtype=torch.float32, device=x.device)
        counters = torch.zeros(tiles_n * blocks_m, dtype=torch.int32, device=x.device)
    kernel = BoundKernel(linear_kernel, (tiles_n, split, blocks_m),
                         {"num_warps": config["NUM_WARPS"], "num_stages": config["NUM_STAGES"]})
    consts = (k, block_m, block_n, block_k, split, chunk, split * chunk != k, config["DOT"], config["REDUCE_AT_END"],
              config["ORDERED"], config["NORM"], config["BIAS"], config["RESIDUAL"], config["SWIGLU"],
              config["GEGLU"], config["NUM_STAGES"], config["EVICT_W"])
    tensors = [x, weight] + [t for t, on in ((norm_weight, config["NORM"]), (bias, config["BIAS"]),
                                             (residual, config["RESIDUAL"])) if on]
    contiguous = all(t.is_contiguous() for t in tensors)

    def run(x, weight, norm_weight, bias, residual, out, eps):
        if not contiguous:  # each call copies into contiguous rows first
            x, weight = x.contiguous(), weight.contiguous()
            norm_weight = norm_weight.contiguous() if config["NORM"] else x
            bias = bias.contiguous() if config["BIAS"] else x
            residual = residual.contiguous() if config["RESIDUAL"] else x
        y = torch.empty(shape, dtype=x.dtype, device=x.device) if out is None else out
        if m and n:
            kernel(x, weight, y, residual if config["RESIDUAL"] else x, norm_weight if config["NORM"] else x,
                   bias if config["BIAS"] else x, x if workspace is None else workspace,
                   x if counters is None else counters, m, n, eps, *consts)
        return y

    run.kernel = kernel  # for inspection
    run.workspace = (workspace, counters) if split > 1 else None
    return run
