"""The Gluon backend of the GEMM genome: which genomes it renders, and how a genome is moved into its region.

`backend=gluon` renders the kernel with Gluon (triton.experimental.gluon) instead of `tl`: a persistent Hopper
kernel whose roles are real warp groups, a one-warp TMA producer feeding a ring of `num_stages` shared-memory
buffers through mbarriers, and `consumers` MMA warp groups issuing asynchronous wgmma: one consumer of
`num_warps` warps on each tile (cooperative: its warp groups split the tile's rows), two consumers of one warp
group each on alternate tiles (ping-pong: one's epilogue runs under the other's main loop), or two or three
consumers of one warp group that split every tile's rows, 64 each (consumer_split=rows: a 192-row tile, cuBLAS's
192x192 on 3000^3-class squares, reads 20% fewer operand bytes per FLOP than 128x192, where the 128x192 kernel's
L2 traffic was the limit in an ncu profile on an H200; each warp group also synchronises alone). Register budgets
move between the roles (setmaxnreg). What Triton's `tl` cannot express on Hopper; see operators/gemm/gluon_source.py.
With `split_k` > 1 a work item is one K range of one tile (long K, few tiles): its fp32 partial leaves from
registers and a second launch sums the partials (and applies the fused epilogue). With `stream_k` one program per
SM takes whole tiles for every full wave, then an even run of the remaining tiles' K steps, the last run to reach a
shared tile summing its partials (operators/gemm/gluon_split.py); one consumer or a row split, not ping-pong.

A Gluon genome holds the structure genes of the Triton rendering at fixed values (GLUON_FIXED: its memory
path is always host tensor descriptors, its grid always persistent), so one kernel has one genome. The tile,
launch and swizzle genes keep their meaning. Rows that are not 16-byte multiples (TMA's rule) take the padded
rows of the Triton rendering's launcher (pad_rows: A copied every call, B once per B tensor, C computed into
padded rows), without split-K (its reduction writes C's rows unpadded). Not rendered with Gluon (refused, named):
other targets than sm_90 (wgmma is Hopper's), fp32 (tf32 wgmma), SwiGLU (two accumulators per tile). The wide
tiles (BLOCK_N 96 and 192, which quantise better on 132 SMs) are two column blocks (64 + 32, 128 + 64: Gluon
tensors have power-of-two shapes), each its own accumulator, wgmma and TMA store on one A tile.
Other fused epilogues (scale, bias, activation, residual) are applied to the accumulator in registers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target
from genomes.gemm_resources import ELEM_BYTES
from genomes.gluon_rules import (
    consumer_violations,
    fixed_violations,
    move_to_consumers,
    set_fixed,
    target_violations,
)

__all__ = ["GLUON_FIXED", "ROWS_PER_CONSUMER", "gluon_smem", "gluon_violations", "gluon_repair", "rows_violations",
           "rows_repair"]

ROWS_PER_CONSUMER = 64  # a row-split consumer is one warp group: one 64-row wgmma tile

# the structure genes a Gluon genome holds fixed (its structure is the rendering's own)
GLUON_FIXED = {"memory": "host_descriptor", "persistent": True,
               "warp_specialize": False, "loop_stages": 0, "loop_unroll": 1, "epilogue_subtile": False}


def gluon_smem(g: Mapping[str, Any], dtype: str) -> int:
    """Shared memory of the rendering: the operand ring (num_stages A and B tiles) plus one output staging tile
    per consumer (its TMA store overlaps the next tile's main loop; split-K stores its fp32 partials from
    registers and stages nothing), plus the ring's mbarriers."""
    e = ELEM_BYTES[dtype]
    ring = g["num_stages"] * (g["BLOCK_M"] * g["BLOCK_K"] + g["BLOCK_K"] * g["BLOCK_N"]) * e
    tiles = 1 if g["consumer_split"] == "rows" else g["consumers"]  # row-split consumers stage one tile together
    staging = tiles * g["BLOCK_M"] * g["BLOCK_N"] * e if g["split_k"] == 1 else 0
    return ring + staging + 16 * g["num_stages"]


def gluon_violations(g: Mapping[str, Any], problem: Problem, target: Target, refusal: str,
                     unaligned: tuple[str, ...]) -> list[str]:
    """Why the Gluon rendering cannot run `problem` on `target` (empty when it can). `refusal` says why the
    family's kernel (a fused epilogue) is not rendered with Gluon ("" when it is); `unaligned` names the row
    lengths that are not 16-byte multiples."""
    out = target_violations(problem, target)
    if unaligned and not g["pad_rows"]:
        out.append(f"the Gluon rendering needs rows of 16-byte multiples (TMA) or padded copies of them (pad_rows); "
                   f"{', '.join(unaligned)} are not")
    if g["pad_rows"] and g["split_k"] > 1:
        out.append("padded rows are not combined with the Gluon split-K (its reduction writes C's rows unpadded)")
    if refusal:
        out.append(f"the Gluon rendering {refusal}")
    out += fixed_violations(g, GLUON_FIXED)
    if g["split_k"] * problem.dims["M"] * problem.dims["N"] >= 2**31:
        out.append(f"split_k={g['split_k']} partials of {problem.dims['M']}x{problem.dims['N']} need 64-bit offsets")
    if g["stream_k"] and g["split_k"] > 1:
        out.append("the Gluon stream-K is not combined with split-K (both share a tile's K steps)")
    if g["stream_k"] and g["consumers"] > 1 and g["consumer_split"] == "tiles":
        out.append("the Gluon stream-K is not combined with ping-pong consumers (every consumer walks every work "
                   "item: one consumer, or a row split)")
    return out + consumer_violations(g, " (ping-pong)") + rows_violations(g)


def rows_violations(g: Mapping[str, Any]) -> list[str]:
    """The row split: 2 or 3 consumers of one warp group, 64 rows each of every tile (BLOCK_M 128 or 192), one
    column range per tile (no split-K); three consumers only split rows."""
    if g["consumer_split"] != "rows":
        return ["three Gluon consumers split a tile's rows (consumer_split=rows)"] if g["consumers"] == 3 else []
    out = []
    if g["BLOCK_M"] != ROWS_PER_CONSUMER * g["consumers"]:
        out.append(f"row-split consumers take {ROWS_PER_CONSUMER} rows each: BLOCK_M = {ROWS_PER_CONSUMER} x "
                   f"consumers, not {g['BLOCK_M']} for {g['consumers']}")
    if g["split_k"] > 1:
        out.append("row-split consumers are not combined with split-K")
    return out


def rows_repair(family: Any, g: dict[str, Any]) -> None:
    """Make the consumers' split agree with the tile in place: BLOCK_M 192 is three row-split consumers, a
    row split takes BLOCK_M / 64 consumers (128: two), and a split that cannot hold goes back to alternate tiles;
    stream-K goes where its consumers cannot all walk its work items (ping-pong) or split-K shares K already."""
    if g["BLOCK_M"] == 192 and g["split_k"] == 1:
        family._set(g, "consumer_split", "rows")
    if g["consumer_split"] == "rows":
        fits = (g["BLOCK_M"] in (128, 192) and g["split_k"] == 1 and family._set(g, "num_warps", 4)
                and family._set(g, "consumers", g["BLOCK_M"] // ROWS_PER_CONSUMER))
        if not fits:
            family._set(g, "consumer_split", "tiles")
    if g["consumer_split"] == "tiles" and g["consumers"] == 3:
        family._set(g, "consumers", 2)
    if g["consumer_split"] == "tiles" and g["BLOCK_M"] == 192:
        family._step_down(g, "BLOCK_M")
    if g["stream_k"] and (g["split_k"] > 1 or g["consumer_split"] == "tiles" and g["consumers"] > 1):
        family._set(g, "stream_k", False)  # stream-K walks one sequence of work items in every consumer


def gluon_repair(family: Any, g: dict[str, Any], problem: Problem, target: Target, refusal: str,
                 unaligned: tuple[str, ...]) -> None:
    """Move `g` (backend=gluon) into the Gluon region in place, with `family`'s moves; back to the Triton
    rendering (one consumer) when the problem or target rules Gluon out."""
    # (M up to 32: a 64-row wgmma tile over so few rows loses to Triton's smaller tiles)
    cannot = (bool(target_violations(problem, target)) or bool(refusal)
              or problem.dims["M"] <= 32 or not set_fixed(family, g, GLUON_FIXED))
    if not cannot and unaligned:  # TMA through padded rows (the family's repair pads them), which the split-K
        cannot = not family._set(g, "split_k", 1)  # reduction does not write
    if not cannot:
        rows_repair(family, g)
        cannot = not move_to_consumers(family, g)
    if cannot:
        family._set(g, "backend", "triton")
        family._set(g, "consumers", 1)
        family._set(g, "consumer_split", "tiles")
