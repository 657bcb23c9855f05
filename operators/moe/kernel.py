"""Mixture-of-Experts expert GEMMs: every token's hidden row x[t] is routed to TOPK of E experts (topk_ids[T, TOPK]);
one launch computes every expert's SwiGLU (`moe_gate_up`), one the down projection with the routing weights applied
and each token's TOPK outputs summed (`moe_down`). Weights are read in place in the layout Hugging Face's Mixtral and
Qwen-MoE experts hold (transformers 5: one 3-D parameter per projection):
  gate_up_proj [E, 2N, K]  (each expert's gate rows, then its up rows: nn.Linear's [out, in])
  down_proj    [E, H, N]   (H = hidden size)

The kernel and its launch plan, as one real module: evo renders a module for a genome by writing a header (the
genome's constants and the entry function) and pasting this file below the marker verbatim.

Routing sorts the T * TOPK slots (slot t * TOPK + j is token t's j-th choice) by expert, stable: offsets[E + 2] say
where each expert's rows start in that order. An id outside [0, E) routes its slot to no expert (transformers'
convention for id E: a masked slot): its rows are zeros. Each program walks work items (expert row block, N tile)
with a stride of the grid (persistent when the grid is smaller than the work), the count of work items read from the
offsets on the GPU, never the host. Structure switches (constexpr):
- ROUTE_IN_KERNEL: each program sorts the few slots of a decode step itself (ranks from compare matrices over the
  slots and the experts: at most 64 slots, 8192 cells), so a call is one launch; else a few torch ops (sort,
  searchsorted: no host synchronisation, graph-capturable) make the order and offsets the kernel reads;
- TILE_MAJOR: work items ordered N tile by N tile (an expert's row blocks side by side read one weight tile), else
  row block by row block, GROUP_M blocks sweeping the N tiles together (their x rows stay in L2);
- SWAP_AB: the product as W tile @ x^T, the weight's BLOCK_N rows the MMA's wide side and the few gathered token
  rows its narrow one (the small-M path for decode: 1-16 tokens, a handful of rows per expert);
- GATE_UP: two weight tiles per K step (gate and up rows of the expert) and silu(gate) * up stored per slot;
  else the down projection, each slot's row scaled by its routing weight and, with TOPK > 1, combined per token:
  COMBINE_IN_KERNEL publishes each slot's fp32 row and the program that brings a token's last slot of an N tile
  sums the TOPK rows in slot order (deterministic: no float atomics, only an integer arrival count), else the
  fp32 rows are left for one torch sum over the slots.
"""

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel

# ---- evo pastes this file from here on into every module it renders for this family ----


@triton.jit
def _block_and_tile(w, total_blocks, tiles_n, GROUP_M: tl.constexpr, TILE_MAJOR: tl.constexpr):
    """(global row block, N tile) of work item w."""
    if TILE_MAJOR:
        return w % total_blocks, w // total_blocks
    per_group = GROUP_M * tiles_n
    first = (w // per_group) * GROUP_M
    rows = tl.minimum(total_blocks - first, GROUP_M)
    return first + (w % per_group) % rows, (w % per_group) // rows


@triton.jit
def _route(ids_ptr, SLOTS: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, SLOTS_PAD: tl.constexpr):
    """(lo, hi, pos) of the routing in topk_ids: the sorted rows [lo[e], hi[e]) of group e (expert e, group E the
    unrouted slots) and each slot's sorted position, stable: the slots with a smaller id, and those with its id
    before it."""
    s = tl.arange(0, SLOTS_PAD)
    ids = tl.load(ids_ptr + s, mask=s < SLOTS, other=E + 1).to(tl.int32)  # padding sorts after every group
    ids = tl.where((s < SLOTS) & ((ids < 0) | (ids >= E)), E, ids)
    es = tl.arange(0, E_PAD)
    lo = tl.sum((ids[None, :] < es[:, None]).to(tl.int32), axis=1)
    hi = tl.sum((ids[None, :] <= es[:, None]).to(tl.int32), axis=1)
    earlier = (ids[None, :] < ids[:, None]) | ((ids[None, :] == ids[:, None]) & (s[None, :] < s[:, None]))
    return lo, hi, tl.sum(earlier.to(tl.int32), axis=1)


@triton.jit
def _expert_tile(a_rows, m_ok, w_rows, w2_rows, k_end, K: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MASK_K: tl.constexpr, SWAP_AB: tl.constexpr,
                 TWO: tl.constexpr, NUM_STAGES: tl.constexpr):
    """fp32 products of the gathered rows a_rows with one (TWO: two) weight tiles over K in [0, k_end): [BLOCK_M,
    BLOCK_N] each, or [BLOCK_N, BLOCK_M] with SWAP_AB. Rows past the block's end load zeros."""
    offs_k = tl.arange(0, BLOCK_K)
    if SWAP_AB:
        acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc2 = acc
    for k in tl.range(0, k_end, BLOCK_K, num_stages=NUM_STAGES):
        ks = k + offs_k
        if MASK_K:
            k_ok = (ks < K)[None, :]
            a = tl.load(a_rows + ks[None, :], mask=m_ok[:, None] & k_ok, other=0.0)
            w = tl.load(w_rows + ks[None, :], mask=k_ok, other=0.0)
        else:
            a = tl.load(a_rows + ks[None, :], mask=m_ok[:, None], other=0.0)
            w = tl.load(w_rows + ks[None, :])
        if SWAP_AB:
            acc = tl.dot(w, tl.trans(a), acc)
        else:
            acc = tl.dot(a, tl.trans(w), acc)
        if TWO:
            if MASK_K:
                w2 = tl.load(w2_rows + ks[None, :], mask=k_ok, other=0.0)
            else:
                w2 = tl.load(w2_rows + ks[None, :])
            if SWAP_AB:
                acc2 = tl.dot(w2, tl.trans(a), acc2)
            else:
                acc2 = tl.dot(a, tl.trans(w2), acc2)
    if SWAP_AB:  # the epilogue works on [BLOCK_M, BLOCK_N]
        acc = tl.trans(acc)
        acc2 = tl.trans(acc2)
    return acc, acc2


@triton.jit
def _combine(acc, slots, tokens, m_ok, cols, n_ok, n_tile, tiles_n, y_ptr, ws_ptr, count_ptr, N,
             TOPK: tl.constexpr, COMBINE_IN_KERNEL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The down projection's weighted fp32 rows: stored into y directly with TOPK 1, else published per slot and,
    in the kernel, summed in slot order by the program that brings a token's last slot of this N tile."""
    keep = m_ok[:, None] & n_ok[None, :]
    if TOPK == 1:
        tl.store(y_ptr + tokens.to(tl.int64)[:, None] * N + cols[None, :], acc.to(y_ptr.dtype.element_ty), mask=keep)
    else:
        tl.store(ws_ptr + slots.to(tl.int64)[:, None] * N + cols[None, :], acc, mask=keep)
        if COMBINE_IN_KERNEL:
            # every thread's stores before the count; acq_rel makes the other slots' rows visible to the last one
            tl.debug_barrier()
            counters = count_ptr + tokens.to(tl.int64) * tiles_n + n_tile
            arrived = tl.atomic_add(counters, tl.full([BLOCK_M], 1, tl.int32), mask=m_ok, sem="acq_rel",
                                    scope="gpu")
            last = m_ok & (arrived == TOPK - 1)
            tl.debug_barrier()
            first = tokens.to(tl.int64) * TOPK
            total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for j in range(TOPK):  # .cg reads L2: this SM's L1 must not serve lines other programs wrote since
                total += tl.load(ws_ptr + (first + j)[:, None] * N + cols[None, :], mask=last[:, None] & n_ok[None, :],
                                 other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + tokens.to(tl.int64)[:, None] * N + cols[None, :], total.to(y_ptr.dtype.element_ty),
                     mask=last[:, None] & n_ok[None, :])
            tl.atomic_xchg(counters, tl.zeros([BLOCK_M], tl.int32), mask=last, sem="relaxed",
                           scope="gpu")  # counted from zero by the next launch


@triton.jit
def moe_kernel(a_ptr, w_ptr, out_ptr, order_ptr, offsets_ptr, rw_ptr, ws_ptr, count_ptr, N,
               K: tl.constexpr, E: tl.constexpr, E_PAD: tl.constexpr, TOPK: tl.constexpr, SLOTS: tl.constexpr,
               SLOTS_PAD: tl.constexpr, ROUTE_IN_KERNEL: tl.constexpr, GATE_UP: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               TILE_MAJOR: tl.constexpr, SWAP_AB: tl.constexpr, MASK_K: tl.constexpr,
               COMBINE_IN_KERNEL: tl.constexpr, NUM_PROGRAMS: tl.constexpr, NUM_STAGES: tl.constexpr):
    """GATE_UP: out[slot, :N] = silu(x[token] @ Wg[e]^T) * (x[token] @ Wu[e]^T), a = x[T, K], w = [E, 2N, K].
    Else: a = h[T * TOPK, K] (slot rows), w = [E, N, K], out = y[T, N] = sum over a token's slots of
    rw[slot] * (h[slot] @ W[e]^T). Group E collects the slots routed to no expert. With ROUTE_IN_KERNEL, order_ptr is
    topk_ids and offsets_ptr unused."""
    pid = tl.program_id(0)
    # the row blocks of each expert (and of group E, the unrouted slots) from the routing's offsets
    es = tl.arange(0, E_PAD)
    if ROUTE_IN_KERNEL:
        lo, hi, pos = _route(order_ptr, SLOTS, E, E_PAD, SLOTS_PAD)
    else:
        lo = tl.load(offsets_ptr + es, mask=es <= E, other=0)
        hi = tl.load(offsets_ptr + es + 1, mask=es <= E, other=0)
    blocks = tl.where(es <= E, (hi - lo + BLOCK_M - 1) // BLOCK_M, 0)
    ends = tl.cumsum(blocks, axis=0)
    total_blocks = tl.sum(blocks, axis=0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    w_rows_per_expert = 2 * N if GATE_UP else N
    for item in tl.range(pid, total_blocks * tiles_n, NUM_PROGRAMS):
        b, n_tile = _block_and_tile(item, total_blocks, tiles_n, GROUP_M, TILE_MAJOR)
        e = tl.sum((ends <= b).to(tl.int32), axis=0)
        mine = es == e
        start = tl.sum(tl.where(mine, lo + (b - (ends - blocks)) * BLOCK_M, 0), axis=0)
        end = tl.sum(tl.where(mine, hi, 0), axis=0)
        rows = start + tl.arange(0, BLOCK_M)
        m_ok = rows < end
        if ROUTE_IN_KERNEL:  # the slot whose sorted position is each row
            slots = tl.sum(tl.where(pos[None, :] == rows[:, None], tl.arange(0, SLOTS_PAD)[None, :], 0), axis=1)
        else:
            slots = tl.load(order_ptr + rows, mask=m_ok, other=0)
        tokens = slots // TOPK
        cols = n_tile * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = cols < N
        # weight rows past N read the last row again and are never stored: the weight loads need no row mask
        last_n = tl.minimum(cols, N - 1).to(tl.int64)
        expert_w = w_ptr + tl.minimum(e, E - 1).to(tl.int64) * w_rows_per_expert * K
        w_rows = expert_w + last_n[:, None] * K
        a_rows = a_ptr + (tokens if GATE_UP else slots).to(tl.int64)[:, None] * K
        k_end = tl.where(e < E, K, 0)  # group E multiplies nothing: its rows are zeros
        acc, up = _expert_tile(a_rows, m_ok, w_rows, w_rows + N * K, k_end, K, BLOCK_M, BLOCK_N, BLOCK_K, MASK_K,
                               SWAP_AB, GATE_UP, NUM_STAGES)
        if GATE_UP:
            out = acc * tl.sigmoid(acc) * up
            tl.store(out_ptr + slots.to(tl.int64)[:, None] * N + cols[None, :], out.to(out_ptr.dtype.element_ty),
                     mask=m_ok[:, None] & n_ok[None, :])
        else:
            weight = tl.load(rw_ptr + slots, mask=m_ok, other=0.0).to(tl.float32)
            _combine(acc * weight[:, None], slots, tokens, m_ok, cols, n_ok, n_tile, tiles_n, out_ptr, ws_ptr,
                     count_ptr, N, TOPK, COMBINE_IN_KERNEL, BLOCK_M, BLOCK_N)


# the most slots (T * TOPK) a program sorts itself, and cells of its compare matrices (slots x slots, groups x slots)
ROUTE_IN_KERNEL_SLOTS = 64
ROUTE_IN_KERNEL_CELLS = 8192


def routes_in_kernel(slots, experts):
    """Whether a program can sort `slots` routed slots over `experts` experts itself (ROUTE_IN_KERNEL)."""
    pad = triton.next_power_of_2(max(slots, 1))
    return slots <= ROUTE_IN_KERNEL_SLOTS and triton.next_power_of_2(experts + 1) * pad <= ROUTE_IN_KERNEL_CELLS


def _described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def moe_routing(topk_ids, num_experts, groups):
    """(order, offsets) of the routing: the T * TOPK slots sorted by expert id, stable (slot order within an expert),
    as int32, and offsets[E + 2] with offsets[e] the first sorted position of expert e, offsets[E] that of the slots
    routed to no expert (ids outside [0, E)). `groups` is arange(E + 2) on the ids' device. Torch ops only, none of
    which waits for the GPU."""
    flat = topk_ids.reshape(-1)
    flat = torch.where((flat >= 0) & (flat < num_experts), flat, num_experts)
    ids, order = torch.sort(flat, stable=True)
    return order.to(torch.int32), torch.searchsorted(ids, groups.to(ids.dtype)).to(torch.int32)


def _check_routing(topk_ids, topk_weights, tokens, num_experts, device):
    """ValueError naming the routing tensor that does not fit T tokens and E experts; returns TOPK."""
    if (not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 or topk_ids.shape[0] != tokens
            or topk_ids.dtype not in (torch.int32, torch.int64) or topk_ids.device != device):
        raise ValueError(f"topk_ids must be an int32 or int64 tensor [T={tokens}, top_k] on {device}; got "
                         f"{_described(topk_ids)}")
    top_k = topk_ids.shape[1]
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k (topk_ids.shape[1]) must be between 1 and the {num_experts} experts; got {top_k}")
    if topk_weights is not None and (not isinstance(topk_weights, torch.Tensor) or topk_weights.shape != (tokens, top_k)
                                     or not topk_weights.is_floating_point() or topk_weights.device != device):
        raise ValueError(f"topk_weights must be a float tensor [T={tokens}, top_k={top_k}] on {device}; got "
                         f"{_described(topk_weights)}")
    return top_k


def moe_plan(a, weight, topk_ids, topk_weights, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid, workspace and the bound kernel. `config` holds the genome's constants (the rendered module's CONFIG); with
    GATE_UP, a is x[T, K] and weight [E, 2N, K]; else a is h[T, TOPK, K] and weight [E, N, K], with topk_weights.
    Returns run(a, weight, topk_ids, topk_weights, out) for every call of this signature."""
    gate_up = config["GATE_UP"]
    what = "x" if gate_up else "h"
    if not isinstance(a, torch.Tensor) or a.dim() not in (2, 3) or a.shape[-1] == 0 or not a.is_floating_point():
        raise ValueError(f"{what} must be a float tensor [tokens, K]" + ("" if gate_up else " or [T, top_k, K]")
                         + f"; got {_described(a)}")
    k = a.shape[-1]
    if (not isinstance(weight, torch.Tensor) or weight.dim() != 3 or weight.shape[2] != k or weight.shape[0] == 0
            or (gate_up and weight.shape[1] % 2) or weight.dtype != a.dtype or weight.device != a.device):
        form = "[E, 2N, K] (each expert's gate rows, then its up rows)" if gate_up else "[E, N, K]"
        raise ValueError(f"weight must be {form} with K={k}, of {what}'s dtype and device; got {_described(weight)}")
    experts = weight.shape[0]
    n = weight.shape[1] // 2 if gate_up else weight.shape[1]
    tokens = topk_ids.shape[0] if isinstance(topk_ids, torch.Tensor) and topk_ids.dim() == 2 else -1
    top_k = _check_routing(topk_ids, None if gate_up else topk_weights, tokens, experts, a.device)
    slots = tokens * top_k
    if gate_up and (a.dim() != 2 or a.shape[0] != tokens):
        raise ValueError(f"x must be [T, K] with the T={tokens} rows of topk_ids; got {_described(a)}")
    if not gate_up and a.shape[:-1] not in ((slots,), (tokens, top_k)):
        raise ValueError(f"h must be [T={tokens}, top_k={top_k}, K] (moe_gate_up's output); got {_described(a)}")
    shape = (tokens, top_k, n) if gate_up else (tokens, n)
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != shape or out.dtype != a.dtype
                            or out.device != a.device or not out.is_contiguous()):
        raise ValueError(f"out must be a contiguous tensor of shape {shape} in {what}'s dtype and device")
    block_m, block_n = config["BLOCK_M"], config["BLOCK_N"]
    tiles_n = triton.cdiv(n, block_n)
    most_blocks = triton.cdiv(slots, block_m) + min(experts + 1, slots)  # each group wastes less than a block
    programs = max(1, min(config["PROGRAMS"] or most_blocks * tiles_n, most_blocks * tiles_n))
    groups = torch.arange(experts + 2, device=a.device)
    combine = not gate_up and top_k > 1
    workspace = counters = None
    if combine:
        workspace = torch.empty(slots * n, dtype=torch.float32, device=a.device)
        if config["COMBINE_IN_KERNEL"]:
            counters = torch.zeros(tokens * tiles_n, dtype=torch.int32, device=a.device)
    kernel = BoundKernel(moe_kernel, (programs,), {"num_warps": config["NUM_WARPS"],
                                                   "num_stages": config["NUM_STAGES"]})
    route_in_kernel = config["ROUTE_IN_KERNEL"] and routes_in_kernel(slots, experts)  # else torch sorts
    consts = (k, experts, triton.next_power_of_2(experts + 1), top_k, slots, triton.next_power_of_2(max(slots, 1)),
              route_in_kernel, gate_up, block_m, block_n, config["BLOCK_K"],
              config["GROUP_M"], config["TILE_MAJOR"], config["SWAP_AB"], k % config["BLOCK_K"] != 0,
              config["COMBINE_IN_KERNEL"], programs, config["NUM_STAGES"])
    contiguous = a.is_contiguous() and weight.is_contiguous() and topk_ids.is_contiguous()

    def run(a, weight, topk_ids, topk_weights, out):
        if not contiguous:  # each call copies into contiguous rows first
            a, weight, topk_ids = a.contiguous(), weight.contiguous(), topk_ids.contiguous()
        y = torch.empty(shape, dtype=a.dtype, device=a.device) if out is None else out
        if slots == 0 or n == 0:
            return y.zero_() if not gate_up else y
        order, offsets = (topk_ids, topk_ids) if route_in_kernel else moe_routing(topk_ids, experts, groups)
        rw = a if gate_up else topk_weights.reshape(-1)
        kernel(a, weight, y, order, offsets, rw, a if workspace is None else workspace,
               a if counters is None else counters, n, *consts)
        if combine and not config["COMBINE_IN_KERNEL"]:  # one torch sum over each token's slots, in slot order
            y.copy_(workspace.view(tokens, top_k, n).sum(dim=1))
        return y

    run.kernel = kernel  # for inspection
    run.route_in_kernel = route_in_kernel
    run.workspace = (workspace, counters)
    return run
