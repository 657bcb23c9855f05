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
registers (under a row split each consumer its rows: cuBLAS's 192x192 split-K at 768x768x49152) and a second
launch sums the partials (and applies the fused epilogue). With `stream_k` one program per
SM takes whole tiles for every full wave, then an even run of the remaining tiles' K steps, the last run to reach a
shared tile summing its partials (operators/gemm/gluon_split.py); one consumer or a row split, not ping-pong.

A Gluon genome holds the structure genes of the Triton rendering at fixed values (GLUON_FIXED: its memory
path is always host tensor descriptors, its grid always persistent), so one kernel has one genome. The tile,
launch and swizzle genes keep their meaning. Rows that are not 16-byte multiples (TMA's rule) take the padded
rows of the Triton rendering's launcher (pad_rows: A copied every call, B once per B tensor, C computed into
padded rows), without split-K (its reduction writes C's rows unpadded). Not rendered with Gluon (refused, named):
other targets than sm_90 (wgmma is Hopper's), fp32 (tf32 wgmma), SwiGLU (two accumulators per tile). The wide
tiles (BLOCK_N 96, 192 and 320, which quantise better on 132 SMs) are two column blocks (64 + 32, 128 + 64,
256 + 64: Gluon tensors have power-of-two shapes), each its own accumulator, wgmma and TMA store on one A tile.
Other fused epilogues (scale, bias, activation, residual) are applied to the accumulator in registers.

The rendering's rules are a table (genomes/rule_table.py), each a check and its fix; a genome moves into them in
GLUON_PLAN's order (`gluon_repair`), or, where one cannot be settled, back to the Triton rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target
from genomes.gemm_resources import ELEM_BYTES, unaligned_rows
from genomes.gluon_rules import TARGET, consumer_rule, fixed_rule
from genomes.rule_table import Rule, reasons, region_repair, steering, table_violations, unmovable

__all__ = ["GLUON_FIXED", "ROWS_PER_CONSUMER", "GLUON_PLAN", "ROWS_PLAN", "gluon_smem", "gluon_rules",
           "gluon_violations", "gluon_steering", "gluon_repair", "rows_unsettled"]

ROWS_PER_CONSUMER = 64  # a row-split consumer is one warp group: one 64-row wgmma tile

# the structure genes a Gluon genome holds fixed (its structure is the rendering's own)
GLUON_FIXED = {"memory": "host_descriptor", "persistent": True,
               "warp_specialize": False, "loop_stages": 0, "loop_unroll": 1, "epilogue_subtile": False}

# the order a genome moves into the rendering's rules: what no move settles first (it leaves at once), the fixed
# genes, the split where rows are padded, the consumers' split of the tile, stream-K beside it, the warps
ROWS_PLAN = ("gluon_rows", "gluon_stream")
GLUON_PLAN = ("gluon_target", "gluon_refusal", "gluon_small_m", "gluon_fixed", "gluon_padded_split", *ROWS_PLAN,
              "gluon_consumers")


def gluon_smem(g: Mapping[str, Any], dtype: str) -> int:
    """Shared memory of the rendering: the operand ring (num_stages A and B tiles) plus one output staging tile
    per consumer (its TMA store overlaps the next tile's main loop; split-K stores its fp32 partials from
    registers and stages nothing), plus the ring's mbarriers."""
    e = ELEM_BYTES[dtype]
    ring = g["num_stages"] * (g["BLOCK_M"] * g["BLOCK_K"] + g["BLOCK_K"] * g["BLOCK_N"]) * e
    tiles = 1 if g["consumer_split"] == "rows" else g["consumers"]  # row-split consumers stage one tile together
    staging = tiles * g["BLOCK_M"] * g["BLOCK_N"] * e if g["split_k"] == 1 else 0
    return ring + staging + 16 * g["num_stages"]


def _unpadded(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    unaligned = unaligned_rows(p)
    if unaligned and not g["pad_rows"]:
        return (f"the Gluon rendering needs rows of 16-byte multiples (TMA) or padded copies of them (pad_rows); "
                f"{', '.join(unaligned)} are not")
    return None


def _padded_split(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if g["pad_rows"] and g["split_k"] > 1:
        return "padded rows are not combined with the Gluon split-K (its reduction writes C's rows unpadded)"
    return None


def _split_where_padded(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """Unaligned rows will be padded (the family's descriptor rule pads them), which the split-K reduction does not
    write: no split there."""
    return not unaligned_rows(p) or family._set(g, "split_k", 1)


def _offsets(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if g["split_k"] * p.dims["M"] * p.dims["N"] >= 2**31:
        return f"split_k={g['split_k']} partials of {p.dims['M']}x{p.dims['N']} need 64-bit offsets"
    return None


def _stream(g: Mapping[str, Any], p: Problem, t: Target) -> list[str]:
    out = []
    if g["stream_k"] and g["split_k"] > 1:
        out.append("the Gluon stream-K is not combined with split-K (both share a tile's K steps)")
    if g["stream_k"] and g["consumers"] > 1 and g["consumer_split"] == "tiles":
        out.append("the Gluon stream-K is not combined with ping-pong consumers (every consumer walks every work "
                   "item: one consumer, or a row split)")
    return out


def _no_stream(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    if g["stream_k"] and (g["split_k"] > 1 or g["consumer_split"] == "tiles" and g["consumers"] > 1):
        family._set(g, "stream_k", False)  # stream-K walks one sequence of work items in every consumer
    return True


def _rows(g: Mapping[str, Any], p: Problem, t: Target) -> list[str]:
    """The row split: 2 or 3 consumers of one warp group, 64 rows each of every tile (BLOCK_M 128 or 192; under
    split-K each stores its rows of every partial); three consumers only split rows."""
    if g["consumer_split"] != "rows":
        return ["three Gluon consumers split a tile's rows (consumer_split=rows)"] if g["consumers"] == 3 else []
    out = []
    if g["BLOCK_M"] != ROWS_PER_CONSUMER * g["consumers"]:
        out.append(f"row-split consumers take {ROWS_PER_CONSUMER} rows each: BLOCK_M = {ROWS_PER_CONSUMER} x "
                   f"consumers, not {g['BLOCK_M']} for {g['consumers']}")
    return out


def _rows_steer(g: Mapping[str, Any], p: Problem, t: Target) -> list[str]:
    """The row split's sensible forms: a 192-row tile is three row-split consumers; one consumer, or a tile of other
    than 128 or 192 rows, takes whole tiles (and row-split consumers are one warp group each)."""
    out = []
    if g["BLOCK_M"] == 192 and g["consumer_split"] == "tiles":
        out.append("BLOCK_M=192 is three consumers of 64 rows (consumer_split=rows)")
    if g["consumer_split"] == "rows" and g["BLOCK_M"] not in (128, 192):
        out.append(f"a row split takes BLOCK_M 128 or 192 ({ROWS_PER_CONSUMER} rows a consumer), not {g['BLOCK_M']}")
    if g["consumer_split"] == "rows" and g["num_warps"] != 4:
        out.append("row-split consumers are one warp group each: num_warps=4")
    return out


def _settle_rows(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """Make the consumers' split agree with the tile: BLOCK_M 192 is three row-split consumers, a row split takes
    BLOCK_M / 64 consumers (128: two), and a split that cannot hold goes back to alternate tiles."""
    if g["BLOCK_M"] == 192:
        family._set(g, "consumer_split", "rows")
    if g["consumer_split"] == "rows":
        fits = (g["BLOCK_M"] in (128, 192) and family._set(g, "num_warps", 4)
                and family._set(g, "consumers", g["BLOCK_M"] // ROWS_PER_CONSUMER))
        if not fits:
            family._set(g, "consumer_split", "tiles")
    if g["consumer_split"] == "tiles" and g["consumers"] == 3:
        family._set(g, "consumers", 2)
    if g["consumer_split"] == "tiles" and g["BLOCK_M"] == 192:
        family._step_down(g, "BLOCK_M")
    return True


def _small_m(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    # (M up to 32: a 64-row wgmma tile over so few rows loses to Triton's smaller tiles)
    return f"M={p.dims['M']} is rendered with Triton (a 64-row wgmma tile over so few rows)" if p.dims["M"] <= 32 \
        else None


def gluon_rules(refusal: str = "") -> tuple[Rule, ...]:
    """The Gluon rendering's rules, in the order violations report them; `refusal` says why the family's kernel (a
    fused epilogue) is not rendered with Gluon ("" when it is)."""
    refused = (lambda g, p, t: f"the Gluon rendering {refusal}") if refusal else (lambda g, p, t: None)
    return (
        TARGET,
        Rule("gluon_unpadded", _unpadded, unmovable(_unpadded)),  # (the family's descriptor rule pads the rows)
        Rule("gluon_padded_split", _padded_split, _split_where_padded),
        Rule("gluon_refusal", refused, unmovable(refused)),
        fixed_rule(GLUON_FIXED),
        Rule("gluon_offsets", _offsets, unmovable(_offsets)),
        Rule("gluon_stream", _stream, _no_stream),
        consumer_rule(" (ping-pong)"),
        Rule("gluon_rows", _rows, _settle_rows, steer=_rows_steer),
        Rule("gluon_small_m", _small_m, unmovable(_small_m), hard=False),
    )


def gluon_violations(rules: tuple[Rule, ...], g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """Why the Gluon rendering cannot run `problem` on `target` with genome values `g` (empty when it can)."""
    return table_violations(rules, g, problem, target)


def gluon_steering(rules: tuple[Rule, ...], g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """What moves a genome that keeps the rendering's rules: its sensible forms (soft rules and steering)."""
    return steering(rules, g, problem, target)


def rows_unsettled(rules: tuple[Rule, ...], g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """What the row split's and stream-K's fixes (ROWS_PLAN) would move."""
    by_name = {rule.name: rule for rule in rules}
    return [r for name in ROWS_PLAN for r in reasons(by_name[name], g, problem, target, soft=True)]


def gluon_repair(family: Any, rules: tuple[Rule, ...], g: dict[str, Any], problem: Problem, target: Target) -> None:
    """Move `g` (backend=gluon) into the Gluon rendering's rules in place, with `family`'s moves; back to the Triton
    rendering (one consumer) when one of them cannot be settled."""
    if not region_repair(family, rules, GLUON_PLAN, g, problem, target):
        family._set(g, "backend", "triton")
        family._set(g, "consumers", 1)
        family._set(g, "consumer_split", "tiles")
