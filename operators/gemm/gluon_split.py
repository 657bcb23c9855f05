"""How the Gluon GEMM (operators/gemm/gluon_kernel.py) shares a tile's K steps among programs: stream-K's work items
and fix-up, which every role of the kernel calls, and split-K's second launch. A real module: evo pastes it from the
marker on into every Gluon GEMM module it renders (operators/gemm/gluon_source.py), before the kernel.

Stream-K (genomes/gemm_gluon.py, stream_k=True). A tile count just past a whole number of waves (153 tiles of
128x256 on 132 SMs), or under one wave (112 at 777x4096x4096, 36 at 768x768x49152), leaves SMs idle; splitting
every tile's K in a fixed number of ways (split-K) only moves the ragged edge. Here the grid is one program per SM,
and a program's work items are:
- whole tiles first, one per full wave of the grid (tile pid, pid + programs, ...): data-parallel, as without it;
- then a run of `sk_share` consecutive K steps of the remaining tiles laid end to end (program p: steps
  [p * sk_share, (p + 1) * sk_share)), crossing from one tile into the next, so every SM gets the same work.
A tile that one run covers whole is stored as any other. Otherwise each run's fp32 partial (this consumer's rows)
leaves registers for the tile's slot of that run, and the run counts itself on the tile's arrival counter
(acq_rel); the run that arrives last sums the partials in K order (the same sum on every launch, whatever the
arrival order), applies the epilogue, stores the tile by TMA and resets the counter for the next launch. No
program waits for another. The producer and every consumer walk the same items, so the ring's step numbers
agree in every role; under a row split each consumer publishes and counts its own rows.

Split-K (split_k > 1): a work item is one K range of one tile; the kernel stores each item's fp32 partial, and a
second launch (`sum_partials`, a `tl` kernel) sums the SPLIT_K partials of every element, applies the fused
epilogue and writes C.
"""

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

# ---- evo pastes this file from here on into every module it renders for this family ----

# a barrier of the calling warps, as Triton 3.9 names it, or as 3.6
thread_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


@gluon.jit
def stream_k_runs(num_tiles, k_tiles, sk_share):
    """This program's work items: its whole tiles (one per full wave of the grid), then the tiles its run of
    stream-K steps meets. Returns their count, the tiles of the full waves, and the run [run_lo, run_hi)."""
    programs = gl.num_programs(0)
    dp_tiles = num_tiles - num_tiles % programs
    sk_steps = (num_tiles - dp_tiles) * k_tiles
    run_lo = gl.minimum(gl.program_id(0) * sk_share, sk_steps)
    run_hi = gl.minimum(run_lo + sk_share, sk_steps)
    # sk_steps is whole tiles of steps: a run that starts at its end meets no tile
    return dp_tiles // programs + gl.cdiv(run_hi, k_tiles) - run_lo // k_tiles, dp_tiles, run_lo, run_hi


@gluon.jit
def stream_k_item(w, dp_tiles, run_lo, run_hi, k_tiles):
    """Work item w of this program: its tile, the tile's K steps [k_lo, k_hi) it covers, and the item's first
    step in the program's sequence of K steps (which names the ring slot and phase in every role)."""
    programs = gl.num_programs(0)
    dp_waves = dp_tiles // programs
    sk = gl.minimum(gl.maximum(w - dp_waves + 1, 0), 1)  # 0: a whole tile of a full wave, 1: part of the run
    sk_tile = run_lo // k_tiles + gl.maximum(w - dp_waves, 0)
    tile_id = (1 - sk) * (gl.program_id(0) + w * programs) + sk * (dp_tiles + sk_tile)
    k_lo = sk * gl.maximum(run_lo - sk_tile * k_tiles, 0)
    k_hi = k_tiles - sk * (k_tiles - gl.minimum(run_hi - sk_tile * k_tiles, k_tiles))
    first_step = (1 - sk) * w * k_tiles + sk * ((dp_waves + sk_tile) * k_tiles + k_lo - run_lo)
    return tile_id, k_lo, k_hi, first_step


@gluon.jit
def stream_k_parts(sk_tile, k_tiles, sk_share):
    """The runs that share stream-K tile sk_tile: the first program whose run meets it, and how many do."""
    first = sk_tile * k_tiles // sk_share
    return first, ((sk_tile + 1) * k_tiles - 1) // sk_share - first + 1


@gluon.jit
def stream_k_fixup(acc, partials, counters, sk_tile, k_tiles, sk_share, sk_slots, CONSUMER: gl.constexpr,
                   CONSUMERS: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, layout: gl.constexpr):
    """A tile that several runs share: publish this run's fp32 partial (this consumer's rows of the tile) in the
    tile's slot for the run, count it, and in the run that arrives last sum every slot in K order. Returns the
    accumulator to store and whether this program stores the tile."""
    ROWS: gl.constexpr = acc.shape[0]
    first, parts = stream_k_parts(sk_tile, k_tiles, sk_share)
    rows = gl.arange(0, ROWS, layout=gl.SliceLayout(1, layout)) + CONSUMER * ROWS
    cols = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    at = gl.expand_dims(rows, 1) * BLOCK_N + gl.expand_dims(cols, 0)
    slots = partials + (sk_tile * sk_slots).to(gl.int64) * (BLOCK_M * BLOCK_N)
    gl.store(slots + (gl.program_id(0) - first) * (BLOCK_M * BLOCK_N) + at, acc)
    thread_barrier()  # every thread's part of the partial is written before one thread counts it
    counter = counters + sk_tile * CONSUMERS + CONSUMER
    last = gl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == parts - 1
    if last:
        # .cg reads L2: this SM's L1 must not serve lines that other SMs have written since
        acc = gl.load(slots + at, cache_modifier=".cg")
        for s in range(1, parts):
            acc += gl.load(slots + s * (BLOCK_M * BLOCK_N) + at, cache_modifier=".cg")
        gl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")  # counted from zero again by the next launch
    return acc, last


@triton.jit
def sum_partials(partials, c_ptr, bias_ptr, residual_ptr, scale, M, N, SPLIT_K: tl.constexpr, REDUCE_R: tl.constexpr,
                 REDUCE_C: tl.constexpr, SCALE: tl.constexpr, BIAS: tl.constexpr, ACTIVATION: tl.constexpr,
                 RESIDUAL: tl.constexpr):
    """Split-K's second launch: C = the sum over the splits of their fp32 partials (the workspace holds SPLIT_K
    blocks of M rows), then the fused epilogue (operators/gemm/epilogue.py: scale, + bias[N], one activation,
    + residual[M, N]) in fp32 before the cast; an operand whose switch is off is never read."""
    offs_cm = tl.program_id(0) * REDUCE_R + tl.arange(0, REDUCE_R)
    offs_cn = tl.program_id(1) * REDUCE_C + tl.arange(0, REDUCE_C)
    inside = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    acc = tl.zeros([REDUCE_R, REDUCE_C], tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(partials + (s * M + offs_cm[:, None]) * N + offs_cn[None, :], mask=inside, other=0.0)
    if SCALE:
        acc = acc * scale
    if BIAS:
        acc += tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)[None, :]
    if ACTIVATION == "gelu":
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    elif ACTIVATION == "gelu_tanh":  # 0.5 x (1 + tanh(u)) = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
        acc = acc * tl.sigmoid(1.5957691216057308 * (acc + 0.044715 * acc * acc * acc))
    elif ACTIVATION == "silu":
        acc = acc * tl.sigmoid(acc)
    elif ACTIVATION == "relu":
        acc = tl.maximum(acc, 0.0)
    if RESIDUAL:
        acc += tl.load(residual_ptr + offs_cm[:, None] * N + offs_cn[None, :], mask=inside, other=0.0).to(tl.float32)
    c_ptrs = c_ptr + offs_cm[:, None] * N + offs_cn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=inside)
