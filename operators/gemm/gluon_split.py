"""How the Gluon GEMM (operators/gemm/gluon_source.py) shares a tile's K steps among programs: split-K's second
launch, and stream-K (genomes/gemm_gluon.py, stream_k=True): what gluon_source puts in its kernel template's loop
markers, and the helpers every role calls.

A tile count just past a whole number of waves (153 tiles of 128x256 on 132 SMs), or under one wave (112 at
777x4096x4096, 36 at 768x768x49152), leaves SMs idle; splitting every tile's K in a fixed number of ways (split-K)
only moves the ragged edge. Here the grid is one program per SM, and a program's work items are:
- whole tiles first, one per full wave of the grid (tile pid, pid + programs, ...): data-parallel, as without it;
- then a run of `sk_share` consecutive K steps of the remaining tiles laid end to end (program p: steps
  [p * sk_share, (p + 1) * sk_share)), crossing from one tile into the next, so every SM gets the same work.
A tile that one run covers whole is stored as any other. Otherwise each run's fp32 partial (this consumer's rows)
leaves registers for the tile's slot of that run, and the run counts itself on the tile's arrival counter
(acq_rel); the run that arrives last sums the partials in K order (the same sum on every launch, whatever the
arrival order), applies the epilogue, stores the tile by TMA and resets the counter for the next launch. No
program waits for another. The producer and every consumer walk the same items, so the ring's step numbers
agree in every role; under a row split each consumer publishes and counts its own rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from operators._template import block as _block

__all__ = ["STREAM_K_LOOPS", "STREAM_K_FIXUP", "STREAM_K_HELPERS", "reduce_source"]

STREAM_K_HELPERS = '''
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
'''

_ITEMS = """\
    works, dp_tiles, run_lo, run_hi = stream_k_runs(num_pid_m * num_pid_n, k_tiles, sk_share)
    for w in range(works):
        tile_id, k_lo, k_hi, first_step = stream_k_item(w, dp_tiles, run_lo, run_hi, k_tiles)"""

# what ends a work item: a shared tile's fix-up, then gluon_source's store indented under `if store:`
STREAM_K_FIXUP = """\
        store = k_hi - k_lo == k_tiles  # one run covered the whole tile
        if k_hi - k_lo < k_tiles:
            acc, store = stream_k_fixup(acc, partials, counters, tile_id - dp_tiles, k_tiles, sk_share, sk_slots,
                                        CONSUMER, CONSUMERS, BLOCK_M, BLOCK_N, acc_layout)
        if store:
"""

# gluon_source's loop markers under stream-K (its TILE_END is STREAM_K_FIXUP and the indented store)
STREAM_K_LOOPS = {
    "LOAD_LOOP": _ITEMS,
    "LOAD_KRANGE": "range(k_lo, k_hi)",
    "MMA_LOOP": _ITEMS,
    "MMA_FIRST_STEP": "first_step",
    "MMA_STEPS": "k_hi - k_lo",
    "SPLIT_PARAM": ",\n        partials, counters, sk_share, sk_slots",
    "SPLIT_ARG": ",\n                        partials, counters, sk_share, sk_slots",
}


def reduce_source(g: Mapping[str, Any]) -> str:
    """split-K's second launch: C = the sum of the SPLIT_K fp32 partials of each element, with the epilogue."""
    ep = g.get("epilogue")
    params = f"{ep.kernel_params()}, " if ep and ep.operands else ""
    lines = ep.triton_lines("acc", "tl.program_id(1) * REDUCE_C", "REDUCE_C") if ep else ""
    epilogue = _block(f"# Fused epilogue: {ep.text}, in fp32 before the cast.\n" + lines, 1) if lines else ""
    return (f"""@triton.jit
def split_k_reduce(partials, c_ptr, {params}M, N, SPLIT_K: tl.constexpr, REDUCE_R: tl.constexpr,
                   REDUCE_C: tl.constexpr):
    \"\"\"C = the sum over the splits of their fp32 partials (the workspace holds SPLIT_K blocks of M rows).\"\"\"
    offs_cm = tl.program_id(0) * REDUCE_R + tl.arange(0, REDUCE_R)
    offs_cn = tl.program_id(1) * REDUCE_C + tl.arange(0, REDUCE_C)
    inside = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    acc = tl.zeros([REDUCE_R, REDUCE_C], tl.float32)
    for s in tl.static_range(SPLIT_K):
        acc += tl.load(partials + (s * M + offs_cm[:, None]) * N + offs_cn[None, :], mask=inside, other=0.0)
""" + epilogue + """    c_ptrs = c_ptr + offs_cm[:, None] * N + offs_cn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=inside)
""")
