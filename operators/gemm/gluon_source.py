"""Gluon source for one GEMM genome with backend=gluon (genomes/gemm_gluon.py): a persistent Hopper kernel
whose roles are warp groups of their own.

- The producer, one warp with a small register budget, walks the program's tiles and their K steps, waiting
  for a free slot of a ring of `NUM_STAGES` shared-memory buffers (its `empty` mbarrier) and filling it with
  the A and B tiles by TMA (the copy arrives on the slot's `ready` mbarrier with its byte count).
- Each consumer, one or two warp groups with the rest of the registers, waits on `ready`, issues the K step's
  wgmma asynchronously, keeps one in flight, and frees the slot of the step before once its wgmma retired. At
  the end of a tile it converts the fp32 accumulator, stages it in shared memory and stores it by TMA without
  waiting: the store drains while the next tile's main loop runs (it is waited for only before the staging
  buffer is written again).
- `CONSUMERS = 2` splits the program's tiles between two one-warp-group consumers, alternately (ping-pong): the
  ring is filled in tile order, so one consumer's main loop runs while the other converts and stores. The two
  take turns at the ring through a pair of mbarriers: without them the second consumer waited on a slot's
  parity a whole round early, took the first tile's data for its own and faulted (seen on an H100).
- `consumer_split = rows`: 2 or 3 one-warp-group consumers take 64 rows each (ROWS) of every tile around one B
  tile, so BLOCK_M is 128 or 192 (a 192-row tile without non-power-of-two tensors: each consumer's A box and
  accumulator are its own). The producer loads one A box per consumer into the slot; a slot's `empty` barrier
  counts one arrival per consumer; no turns are needed, since every consumer reads every slot in ring order. Each
  warp group then synchronises only with itself (Triton puts a warp-group barrier before every mbarrier arrive).
- A wide tile (BLOCK_N 96 or 192) is two column blocks, BLOCK_N0 + BLOCK_N1 (powers of two): the producer loads
  a B tile of each per K step, the consumer issues a wgmma on each into an accumulator of its own and stores each
  through its own staging buffer and descriptor.
Every index into the ring follows from the step's position in the program's sequence of K steps, the same
count in the producer and the consumers, so the mbarrier phases need no other shared state.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from evo.launch import runtime_source
from genomes.gemm_resources import column_blocks
from operators._template import block as _block
from operators.gemm.gluon_split import STREAM_K_FIXUP, STREAM_K_HELPERS, STREAM_K_LOOPS, reduce_source
from operators.gemm.header import constants_table
from operators.gemm.header import summary as _summary
from operators.gemm.launcher import ENTRY_NAME, KERNEL_NAME, gluon_launcher_source
from operators.gemm.source import tile_coords_source

__all__ = ["gluon_source", "PRODUCER_REGS", "CONSUMER_REGS"]

PRODUCER_REGS = 40  # registers per thread of the producer warp: it holds only indices and barrier phases
CONSUMER_REGS = 232  # of a second consumer warp group (the first gets what the kernel's budget leaves)
# of the second and third of three consumers: 16 warps share the 64K registers (4 x 128 x 152 + the producer's)
THREE_CONSUMER_REGS = 152

_IMPORTS = """\
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# the TMA copies as Triton 3.9 names them, or as 3.6 (the older names are gone from 3.9)
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
"""

_PARTITIONS = '''
@gluon.jit
def load_partition(a_desc, b_desc,B1_DESC a_bufs, b_bufs,B1_BUFS ready, empty, M, N, K, BLOCK_M: gl.constexpr,
                   BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                   NUM_STAGES: gl.constexprSPLIT_PARAMWIDE_PARAMLOAD_ROWS_PARAM):
    """The producer: every K step of every tile of this program, in order, into the next slot of the ring."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    step = 0
LOAD_LOOP
        CALL_COORDS
        for kk in LOAD_KRANGE:
            slot = step % NUM_STAGES
            # wait for the slot's previous tile to be consumed (a fresh barrier passes the first round)
            mbarrier.wait(empty.index(slot), ((step // NUM_STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytesB1_BYTES)
            tma_load(a_desc, [pid_m * BLOCK_M, kk * BLOCK_K], ready.index(slot), a_bufs.index(slot))
            tma_load(b_desc, [kk * BLOCK_K, pid_n * BLOCK_N], ready.index(slot), b_bufs.index(slot))
B1_LOAD            step += 1


@gluon.jit
def mma_partition(c_desc,C1_DESCEPILOGUE_PARAMS
                  a_bufs, b_bufs,B1_BUFS c_bufs,C1_BUFS ready, empty, turns, M, N, K, BLOCK_M: gl.constexpr,
                  BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr,
                  CONSUMER: gl.constexpr, CONSUMERS: gl.constexpr, WARPS: gl.constexprSPLIT_PARAMWIDE_PARAMROWS_PARAM):
    """A consumer: tiles CONSUMER, CONSUMER + CONSUMERS, ... of this program, by asynchronous wgmma."""
ACC_LAYOUTS    c_smem = c_bufs.index(CONSUMER)
C1_SMEM    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    pid = gl.program_id(0)
    programs = gl.num_programs(0)
    mine = 0  # tiles this consumer has taken
MMA_LOOP
        CALL_COORDS
        step = MMA_FIRST_STEP  # this tile's first K step in the program's sequence
        if CONSUMERS > 1:
            # take turns at the ring: a consumer's K steps start only once the other's previous tile has waited
            # for all of its own (a slot's parity names one of two rounds, so the ring's reader must never be more
            # than a round ahead of it); consumer 0's first wait passes at once
            mbarrier.wait(turns.index(CONSUMER), (mine & 1) ^ (1 - CONSUMER))
ACC_INIT        for kk in range(MMA_STEPS):
            slot = step % NUM_STAGES
            mbarrier.wait(ready.index(slot), (step // NUM_STAGES) & 1)
MMA_ISSUE            mbarrier.arrive(empty.index((step + NUM_STAGES - 1) % NUM_STAGES), count=1, pred=kk > 0)
            step += 1
        if CONSUMERS > 1:
            mbarrier.arrive(turns.index(1 - CONSUMER), count=1)  # the other consumer's turn at the ring
        mine += 1
ACC_DRAIN        mbarrier.arrive(empty.index((step + NUM_STAGES - 1) % NUM_STAGES), count=1)
TILE_END    tma.store_wait(0)


@gluon.jit
def KERNEL(
        a_desc, b_desc,B1_DESC c_desc,C1_DESCEPILOGUE_PARAMS
        M, N, K, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
        NUM_STAGES: gl.constexpr, CONSUMERS: gl.constexpr, CONSUMER_WARPS: gl.constexprSPLIT_PARAMWIDE_PARAMROWS_PARAM):
    """Shared memory and mbarriers for every role, then the roles: consumer 0 in this kernel's own warps, the
    other consumer and the producer in warps of their own."""
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_K, B_WIDTH], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, BLOCK_M, B_WIDTH], c_desc.layout)
WIDE_BUFS    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # ping-pong's order
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    gl.warp_specialize(PARTITIONS)
'''


def _coords_call(g: Mapping[str, Any]) -> str:
    """The call that sets pid_m and pid_n (GROUP_M reaches every role as a constexpr; used where it is > 1)."""
    return f"pid_m, pid_n = tile_coords(tile_id, num_pid_m, num_pid_n{', GROUP_M' if g['GROUP_M'] > 1 else ''})"


def _partitions(g: Mapping[str, Any]) -> str:
    """The gl.warp_specialize call: consumer 0 (the default partition), consumer 1 if any, the producer."""
    if len(column_blocks(g["BLOCK_N"])) == 1:
        loader = ("(load_partition, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, M, N, K, BLOCK_M, BLOCK_N,\n"
                  "                         BLOCK_K, GROUP_M, NUM_STAGESSPLIT_ARG))")
        consumers = [("(mma_partition, (c_desc,EPILOGUE_PARAMS a_bufs, b_bufs, c_bufs, ready, empty, turns,\n"
                      "                        M, N, K, BLOCK_M, BLOCK_N, "
                      f"BLOCK_K, GROUP_M, NUM_STAGES, {i}, CONSUMERS, "
                      f"{'CONSUMER_WARPS' if i == 0 else 4}SPLIT_ARG))") for i in range(g["consumers"])]
    else:  # two column blocks: their B and C descriptors and buffers, and the blocks' widths
        loader = ("(load_partition, (a_desc, b_desc, b1_desc, a_bufs, b_bufs, b1_bufs, ready, empty, M, N, K,\n"
                  "                         BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, BLOCK_N0, BLOCK_N1))")
        consumers = [("(mma_partition, (c_desc, c1_desc,EPILOGUE_PARAMS a_bufs, b_bufs, b1_bufs, c_bufs, c1_bufs,\n"
                      "                        ready, empty, turns, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, "
                      f"NUM_STAGES, {i},\n                        CONSUMERS, "
                      f"{'CONSUMER_WARPS' if i == 0 else 4}, BLOCK_N0, BLOCK_N1))") for i in range(g["consumers"])]
    if g["consumer_split"] == "rows":
        consumers = [c.replace("))", ", ROWS))") for c in consumers]
        loader = loader.replace("))", ", CONSUMERS, ROWS))")
    warps = [4] * (g["consumers"] - 1) + [1]
    regs = ["CONSUMER_REGS"] * (g["consumers"] - 1) + ["PRODUCER_REGS"]
    items = "".join(f"        {p},\n" for p in consumers + [loader])
    return f"[\n{items}    ], {warps}, [{', '.join(regs)}]"


_STORE_TILE = """\
EPILOGUE_LINES        tma.store_wait(0)  # the previous tile's store has left the staging buffer
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma_store(c_desc, [pid_m * BLOCK_M, pid_n * BLOCK_N], c_smem)
"""
# split-K: a work item is one K range of one tile; its fp32 partial goes to the plan's workspace from registers
# (no staging buffer), and a second launch (split_k_reduce) sums the partials, applies the epilogue and writes C
_STORE_PARTIAL = """\
        rows = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, acc_layout))
        cols = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, acc_layout))
        inside = (gl.expand_dims(rows, 1) < M) & (gl.expand_dims(cols, 0) < N)
        at = (work % SPLIT_K * M + gl.expand_dims(rows, 1)) * N + gl.expand_dims(cols, 0)
        gl.store(partials + at, acc, mask=inside)
"""
_SPLIT_LOOPS = {
    "LOAD_LOOP": ("    for tile_id in range(gl.program_id(0), num_pid_m * num_pid_n, gl.num_programs(0)):",
                  "    k_steps = gl.cdiv(k_tiles, SPLIT_K)  # the same count for every split: steps past K load zeros\n"
                  "    for work in range(gl.program_id(0), num_pid_m * num_pid_n * SPLIT_K, gl.num_programs(0)):\n"
                  "        tile_id = work // SPLIT_K"),
    "LOAD_KRANGE": ("range(k_tiles)", "range(work % SPLIT_K * k_steps, (work % SPLIT_K + 1) * k_steps)"),
    "MMA_LOOP": ("    for tile_id in range(pid + CONSUMER * programs, num_pid_m * num_pid_n, CONSUMERS * programs):",
                 "    k_steps = gl.cdiv(k_tiles, SPLIT_K)\n"
                 "    for work in range(pid + CONSUMER * programs, num_pid_m * num_pid_n * SPLIT_K,\n"
                 "                      CONSUMERS * programs):\n"
                 "        tile_id = work // SPLIT_K"),
    "MMA_FIRST_STEP": ("(tile_id - pid) // programs * k_tiles", "(work - pid) // programs * k_steps"),
    "MMA_STEPS": ("k_tiles", "k_steps"),
    "TILE_END": (_STORE_TILE, _STORE_PARTIAL),
    "SPLIT_PARAM": ("", ", SPLIT_K: gl.constexpr"),
    "SPLIT_ARG": ("", ", SPLIT_K"),
}


_LAYOUT = """\
    {acc}_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1],
    {pad}instr_shape=[16, {width}, 16])
"""
# a tile of one column block (a power of two), or of two (BLOCK_N0 + BLOCK_N1 = 96 or 192: wgmma takes such
# widths, Gluon tensors do not, so each K step issues a wgmma per block on the same A tile)
_ONE_BLOCK = {
    "B1_DESC": "", "B1_BUFS": "", "C1_DESC": "", "C1_BUFS": "", "B1_BYTES": "", "B1_LOAD": "", "WIDE_PARAM": "",
    "C1_SMEM": "", "WIDE_BUFS": "", "B_WIDTH": "BLOCK_N",
    "ACC_LAYOUTS": _LAYOUT.format(acc="acc", pad=" " * 53, width="BLOCK_N"),
    "ACC_INIT": "        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)\n",
    "MMA_ISSUE": """\
            acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot), acc, is_async=True)
            # at most one wgmma in flight: the previous step's has retired, so its slot is free again
            acc = warpgroup_mma_wait(1, deps=(acc, a_bufs.index(slot), b_bufs.index(slot)))[0]
""",
    "ACC_DRAIN": "        acc = warpgroup_mma_wait(0, deps=(acc,))\n",
}
_TWO_BLOCKS = {
    "B1_DESC": " b1_desc,", "B1_BUFS": " b1_bufs,", "C1_DESC": " c1_desc,", "C1_BUFS": " c1_bufs,",
    "B1_BYTES": " + b1_desc.block_type.nbytes",
    "B1_LOAD": "            tma_load(b1_desc, [kk * BLOCK_K, pid_n * BLOCK_N + BLOCK_N0], ready.index(slot),\n"
               "                     b1_bufs.index(slot))\n",
    "WIDE_PARAM": ", BLOCK_N0: gl.constexpr,\n        BLOCK_N1: gl.constexpr",
    "C1_SMEM": "    c1_smem = c1_bufs.index(CONSUMER)\n", "B_WIDTH": "BLOCK_N0",
    "WIDE_BUFS": """\
    b1_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_K, BLOCK_N1], b1_desc.layout)
    c1_bufs = gl.allocate_shared_memory(dtype, [CONSUMERS, BLOCK_M, BLOCK_N1], c1_desc.layout)
""",
    "ACC_LAYOUTS": _LAYOUT.format(acc="acc", pad=" " * 53, width="BLOCK_N0")
                   + _LAYOUT.format(acc="acc1", pad=" " * 54, width="BLOCK_N1"),
    "ACC_INIT": "        acc = gl.zeros([BLOCK_M, BLOCK_N0], gl.float32, acc_layout)\n"
                "        acc1 = gl.zeros([BLOCK_M, BLOCK_N1], gl.float32, acc1_layout)\n",
    "MMA_ISSUE": """\
            acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot), acc, is_async=True)
            acc1 = warpgroup_mma(a_bufs.index(slot), b1_bufs.index(slot), acc1, is_async=True)
            # at most one step's two wgmma in flight: the previous step's have retired, so its slot is free again
            done = warpgroup_mma_wait(2, deps=(acc, acc1, a_bufs.index(slot), b_bufs.index(slot),
                                               b1_bufs.index(slot)))
            acc = done[0]
            acc1 = done[1]
""",
    "ACC_DRAIN": """\
        done = warpgroup_mma_wait(0, deps=(acc, acc1))
        acc = done[0]
        acc1 = done[1]
""",
}
_STORE_SECOND = """\
        c1_smem.store(acc1.to(c1_desc.dtype))
        fence_async_shared()
        tma_store(c1_desc, [pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N0], c1_smem)
"""


_TILE_LOOP = "range(pid + CONSUMER * programs, num_pid_m * num_pid_n, CONSUMERS * programs):"  # ping-pong's tiles
# consumer_split=rows: every consumer (one warp group) takes ROWS = 64 rows of every tile; the producer loads the
# tile's A rows as one TMA box per consumer and one B tile for all, and a slot is free once each consumer released
# it (its `empty` barrier counts CONSUMERS arrivals). Edits of the rendering above, (old, new) in order; each
# must change something, except those of _ROW_SPLIT_OPTIONAL.
_ROW_SPLIT = (
    ("LOAD_ROWS_PARAM", ", CONSUMERS: gl.constexpr, ROWS: gl.constexpr"),
    ("ROWS_PARAM", ", ROWS: gl.constexpr"),
    ("tiles CONSUMER, CONSUMER + CONSUMERS, ... of this program",
     "ROWS rows, from CONSUMER * ROWS on,\n    of every tile of this program"),
    ("mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes",
     "mbarrier.expect(ready.index(slot), CONSUMERS * a_desc.block_type.nbytes"),
    ("            tma_load(a_desc, [pid_m * BLOCK_M, kk * BLOCK_K], ready.index(slot), a_bufs.index(slot))\n",
     "            for r in gl.static_range(CONSUMERS):  # a box of ROWS rows per consumer\n"
     "                tma_load(a_desc, [pid_m * BLOCK_M + r * ROWS, kk * BLOCK_K], ready.index(slot),\n"
     "                         a_bufs.index(slot * CONSUMERS + r))\n"),
    (_TILE_LOOP,
     "range(pid, num_pid_m * num_pid_n, programs):  # every tile, ROWS rows of it"),
    ("""        if CONSUMERS > 1:
            # take turns at the ring: a consumer's K steps start only once the other's previous tile has waited
            # for all of its own (a slot's parity names one of two rounds, so the ring's reader must never be more
            # than a round ahead of it); consumer 0's first wait passes at once
            mbarrier.wait(turns.index(CONSUMER), (mine & 1) ^ (1 - CONSUMER))
""", ""),
    ("""        if CONSUMERS > 1:
            mbarrier.arrive(turns.index(1 - CONSUMER), count=1)  # the other consumer's turn at the ring
""", ""),
    ("a_bufs.index(slot), b", "a_bufs.index(slot * CONSUMERS + CONSUMER), b"),
    ("gl.zeros([BLOCK_M, ", "gl.zeros([ROWS, "),
    ("[pid_m * BLOCK_M, pid_n", "[pid_m * BLOCK_M + CONSUMER * ROWS, pid_n"),
    ("offs_em = pid_m * BLOCK_M + gl.arange(0, BLOCK_M,",  # a residual epilogue's rows
     "offs_em = pid_m * BLOCK_M + CONSUMER * ROWS + gl.arange(0, ROWS,"),
    ("gl.allocate_shared_memory(dtype, [NUM_STAGES, BLOCK_M, BLOCK_K]",
     "gl.allocate_shared_memory(dtype, [NUM_STAGES * CONSUMERS, ROWS, BLOCK_K]"),
    ("gl.allocate_shared_memory(dtype, [CONSUMERS, BLOCK_M, ", "gl.allocate_shared_memory(dtype, [CONSUMERS, ROWS, "),
    ("mbarrier.init(empty.index(i), count=1)", "mbarrier.init(empty.index(i), count=CONSUMERS)"),
)
_ROW_SPLIT_OPTIONAL = {"offs_em = pid_m * BLOCK_M + gl.arange(0, BLOCK_M,"}  # only a residual epilogue has it


def _kernel(g: Mapping[str, Any]) -> str:
    ep, split, wide = g.get("epilogue"), g["split_k"] > 1, len(column_blocks(g["BLOCK_N"])) > 1
    params = f" {ep.kernel_params()}," if ep and ep.operands and not split else " partials," if split else ""
    lines = ""
    if ep and not split:  # split-K: the reduction applies the epilogue
        lines = ep.gluon_lines("acc", width="BLOCK_N0" if wide else "BLOCK_N")
        if wide:
            lines += ep.gluon_lines("acc1", layout="acc1_layout", width="BLOCK_N1", offset=" + BLOCK_N0")
    epilogue = _block(f"# Fused epilogue: {ep.text}, in fp32 before the cast.\n" + lines, 2) if lines else ""
    stream_k = g["stream_k"]
    budget = THREE_CONSUMER_REGS if g["consumers"] == 3 else CONSUMER_REGS
    regs = f"CONSUMER_REGS: gl.constexpr = {budget}\n    PRODUCER_REGS: gl.constexpr = {PRODUCER_REGS}\n"
    specialize = "    " + regs + "    gl.warp_specialize(" + _partitions(g) + ")"
    text = (_PARTITIONS.replace("KERNEL", KERNEL_NAME).replace("CALL_COORDS", _coords_call(g))
            .replace("    gl.warp_specialize(PARTITIONS)", specialize))
    for marker, (plain, with_split) in _SPLIT_LOOPS.items():
        if stream_k:  # a shared tile's fix-up, then the store (epilogue included) under `if store:`
            value = STREAM_K_FIXUP + textwrap.indent(plain.replace("EPILOGUE_LINES", epilogue), "    ") \
                if marker == "TILE_END" else STREAM_K_LOOPS[marker]
        else:
            value = with_split if split else plain
        text = text.replace(marker, value)
    if wide:
        text = text.replace("        tma_store(c_desc, [pid_m * BLOCK_M, pid_n * BLOCK_N], c_smem)\n",
                            "        tma_store(c_desc, [pid_m * BLOCK_M, pid_n * BLOCK_N], c_smem)\n" + _STORE_SECOND)
    for marker, value in (_TWO_BLOCKS if wide else _ONE_BLOCK).items():
        text = text.replace(marker, value)
    text = text.replace("EPILOGUE_PARAMS", params).replace("EPILOGUE_LINES", epilogue)
    optional = _ROW_SPLIT_OPTIONAL | ({_TILE_LOOP} if stream_k else set())  # stream-K's own tile loop
    for old, new in _ROW_SPLIT if g["consumer_split"] == "rows" else (("LOAD_ROWS_PARAM", ""), ("ROWS_PARAM", "")):
        if old not in text and old not in optional:
            raise AssertionError(f"the row split's edit {old[:60]!r} found nothing to change")
        text = text.replace(old, new)
    return text.strip("\n") + "\n"


def _constants(g: Mapping[str, Any]) -> str:
    rows = [("BLOCK_M", g["BLOCK_M"], "rows of C per tile"), ("BLOCK_N", g["BLOCK_N"], "columns of C per tile"),
            ("BLOCK_K", g["BLOCK_K"], "depth of one K step")]
    blocks = column_blocks(g["BLOCK_N"])
    if len(blocks) > 1:
        rows.append(("BLOCK_N0, BLOCK_N1", f"{blocks[0]}, {blocks[1]}",
                     "the tile's two column blocks (a wgmma and a TMA store each)"))
    unit = "rows" if g["raster"] == "row" else "columns"
    rows.append(("GROUP_M", g["GROUP_M"], f"tile-{unit} per swizzle group" if g["GROUP_M"] > 1 else "no grouping"))
    split = g["consumer_split"] == "rows"
    rows += [("NUM_STAGES", g["num_stages"], "slots of the producer's ring of A and B tiles"),
             ("CONSUMERS", g["consumers"], "MMA consumers, one warp group each, splitting every tile's rows" if split
              else "MMA consumers: 1 on every tile, 2 on alternate tiles (ping-pong)"),
             ("NUM_WARPS", g["num_warps"], "warps of the first consumer (the producer's warp is added)")]
    if split:
        rows.append(("ROWS", g["BLOCK_M"] // g["consumers"], "rows of each tile per consumer (its A box and C store)"))
    if g["split_k"] > 1:
        rows += [("SPLIT_K", g["split_k"], "K ranges per tile: fp32 partials, then a reducing launch"),
                 ("REDUCE_R, REDUCE_C", "32, 128", "rows and columns per program of the reduction")]
    return constants_table(rows)


def gluon_source(g: Mapping[str, Any], title: str, epilogue: Any = None) -> str:
    """The whole module for Gluon genome values `g`; `title` opens its docstring (names the genome). `epilogue`
    (an operators.gemm.epilogue.Epilogue, not SwiGLU) is applied to each tile's accumulator before its store."""
    if epilogue is not None and epilogue.swiglu:
        raise ValueError("the Gluon rendering has one accumulator per tile: no SwiGLU")
    g = {**g, "epilogue": epilogue}
    what = textwrap.fill(f"C[M, N] = A[M, K] @ B[K, N], row-major, fp32 accumulation: {_summary(g)}.", 100)
    roles = textwrap.fill(
        "Rendered with Gluon: a one-warp TMA producer fills a ring of shared-memory slots guarded by mbarriers; "
        + ("one consumer of NUM_WARPS warps runs every tile's wgmma" if g["consumers"] == 1 else
           f"{g['consumers']} one-warp-group consumers take ROWS rows each of every tile, sharing its B tile"
           if g["consumer_split"] == "rows" else "two one-warp-group consumers take alternate tiles (ping-pong)")
        + "; each tile's TMA store overlaps the next tile's main loop"
        + ("; the tiles past the grid's last full wave are shared by runs of K steps (stream-K)." if g["stream_k"]
           else "."), 100)
    args = ", ".join(["a", "b", *(epilogue.operands if epilogue else ()), "out=None"])
    call = (textwrap.fill(f"Call {ENTRY_NAME}({args}) for fp16 or bf16 operands on an sm_90 GPU; rows that are "
                          "not 16-byte multiples are copied into padded rows first (TMA needs them).", 100)
            if g["pad_rows"] else
            f"Call {ENTRY_NAME}({args}) for fp16 or bf16 operands whose rows are 16-byte multiples, on an sm_90 GPU.")
    header = f'"""{title}\n\n{what}\n{roles}\n{call}\n"""\n'
    coords = tile_coords_source(g).replace("@triton.jit", "@gluon.jit").replace("tl.", "gl.")
    split = g["split_k"] > 1
    # the split-K reduction and the padding copies are tl kernels; padded B is copied once per B tensor (weakref)
    imports = _IMPORTS.replace("import triton\n", "import triton\nimport triton.language as tl\n", 1) \
        if split or g["pad_rows"] else _IMPORTS
    imports = ("import weakref\n\n" if g["pad_rows"] else "") + imports
    if g["stream_k"]:  # a barrier of the calling warps, as Triton 3.9 names it, or as 3.6
        imports += 'thread_barrier = getattr(gl, "thread_barrier", None) or gl.barrier\n'
    helpers = reduce_source(g) if split else STREAM_K_HELPERS.strip("\n") + "\n" if g["stream_k"] else ""
    return (header + "\n" + imports + "\n" + runtime_source() + "\n\n" + _constants(g) + "\n\n" + coords
            + "\n\n" + _kernel(g) + ("\n\n" + helpers if helpers else "") + "\n\n" + gluon_launcher_source(g))
