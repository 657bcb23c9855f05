"""The Gluon backend of the attention genome: which genomes it renders, and how a genome is moved into its region.

`backend=gluon` renders the forward kernel with Gluon (triton.experimental.gluon) instead of `tl`, with the roles
of FlashAttention-3 as warp groups of their own: a one-warp TMA producer loads each program's query tiles once
and streams K and V through a ring of `num_stages` shared-memory slots (ready and empty mbarriers), and
`consumers` MMA partitions of `num_warps` warps each own BLOCK_M query rows of the program, issue the scores
(Q K^T) and the output update (P V) as asynchronous wgmma, and keep the online softmax in registers; the
probabilities go to the P V wgmma from registers, never through shared memory. `overlap` pipelines a
consumer's steps as FlashAttention-3 does within a warp group: the scores of key block j are issued before the
P V product of block j - 1, and the softmax of block j runs while that product is in flight (three consumers are
FlashAttention-3's head-dim-64 form, 192 query rows per K/V tile, within a smaller register budget); `pingpong` (two
consumers, overlap) makes the consumers take turns issuing those products, so that one's softmax runs while the
other's products hold the tensor cores (FlashAttention-3's inter-warp-group schedule).

A Gluon genome holds the structure genes of the Triton rendering at fixed values (GLUON_FIXED: K and V always
by TMA, no key split, no packing of GQA heads: the decode forms stay Triton's), so one kernel has one genome;
`persistent` keeps its meaning (programs per SM of a grid that loops over the (query tile, head) work items in
issue order, the longest causal rows first with `q_order: reverse`), as do the tiles, warps and stages. Not
rendered with Gluon (refused, named): other targets than sm_90, the CPU
interpreter, fp32, head dims other than 64 and 128 (Gluon tensors are powers of two; wider heads do not fit the
registers), short queries (decode: a 64-row wgmma over a few rows wastes most of it).

The rendering's rules are a table (genomes/rule_table.py), each a check and its fix; a genome moves into them in
GLUON_PLAN's order (`gluon_repair`), or, where one cannot be settled, back to the Triton rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target
from genomes.gluon_rules import ROWS_PER_WARP, TARGET, consumer_rule, fixed_rule
from genomes.rule_table import Rule, region_repair, steering, table_violations, unmovable

__all__ = ["GLUON_FIXED", "GLUON_HEAD_DIMS", "GLUON_RULES", "GLUON_PLAN", "gluon_smem", "gluon_live",
           "gluon_violations", "gluon_steering", "gluon_repair", "MIN_GLUON_ROWS"]

GLUON_FIXED = {"pack_gqa": False, "kv_split": 1, "reduce": "launch", "mask_loop": "split", "grid": "tiles_first",
               "kv_load": "tma"}
GLUON_HEAD_DIMS = (64, 128)
MIN_GLUON_ROWS = 128  # query rows per head below which the Gluon rendering is not tried (decode is Triton's)
_ELEM_BYTES = {"fp16": 2, "bf16": 2}
_MAX_LIVE = 160  # fp32 values a consumer thread may keep (scores, output, and with overlap the next scores)
# the same under three consumers' 160-register budget (sm_90, Triton 3.6: 112 compiled without spills at head dim
# 128, 128 spilled 813 load/store instructions at head dim 64)
_MAX_LIVE_THREE = 112


def _max_live(g: Mapping[str, Any]) -> int:
    return _MAX_LIVE_THREE if g["consumers"] == 3 else _MAX_LIVE


def gluon_smem(g: Mapping[str, Any], problem: Problem) -> int:
    """Shared memory: each consumer's query tile, the ring's K and V tiles, and the mbarriers."""
    e, d = _ELEM_BYTES.get(problem.dtype, 4), problem.dims["head_dim"]
    return e * d * (g["consumers"] * g["BLOCK_M"] + 2 * g["num_stages"] * g["BLOCK_N"]) + 8 * (3 * g["num_stages"] + 2)


def gluon_live(g: Mapping[str, Any], problem: Problem) -> int:
    """fp32 values a consumer thread keeps: the output tile and the scores, plus with `overlap` the previous
    block's probabilities (16-bit: half a register each) while the next scores are computed."""
    scores = g["BLOCK_M"] * g["BLOCK_N"]
    live = g["BLOCK_M"] * problem.dims["head_dim"] + scores + (scores // 2 if g["overlap"] else 0)
    return live // (32 * g["num_warps"])


def _head_dims(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if p.dims["head_dim"] not in GLUON_HEAD_DIMS:
        return f"the Gluon rendering takes head dims {GLUON_HEAD_DIMS}, not {p.dims['head_dim']}"
    return None


def _short(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if p.dims["q_len"] < MIN_GLUON_ROWS:
        return f"{p.dims['q_len']} query rows are the Triton rendering's (under {MIN_GLUON_ROWS})"
    return None


def _pingpong(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if g["pingpong"] and not (g["consumers"] == 2 and g["overlap"]):
        return "pingpong: the consumers take turns with their overlapped products: consumers=2 and overlap"
    return None


def _no_pingpong(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    if _pingpong(g, p, t) is not None:
        family._set(g, "pingpong", False)
    return True


def _stages(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if g["num_stages"] < 2:
        return ("the Gluon rendering's K/V ring needs num_stages >= 2 (a consumer holds one slot while it waits for "
                "the next)")
    return None


def _deeper(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    while g["num_stages"] < 2:
        if not family._step_up(g, "num_stages"):
            return False
    return True


def _live(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    live = gluon_live(g, p)
    if live > _max_live(g):
        return (f"a Gluon consumer thread would keep ~{live} fp32 values (> {_max_live(g)} with {g['consumers']} "
                "consumers)")
    return None


def _fewer_live(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """Narrower key blocks (down to 64), no overlap, two consumers of three, a consumer of two warp groups, shorter
    query tiles; it cannot when none is left."""
    while gluon_live(g, p) > _max_live(g):
        if g["BLOCK_N"] > 64:
            family._step_down(g, "BLOCK_N")
        elif g["overlap"]:
            family._set(g, "overlap", False)
        elif g["consumers"] == 3:
            family._set(g, "consumers", 2)
        elif g["consumers"] == 1 and g["num_warps"] == 4 and g["BLOCK_M"] >= 128:
            family._set(g, "num_warps", 8)
        elif g["BLOCK_M"] > ROWS_PER_WARP * g["num_warps"]:
            family._step_down(g, "BLOCK_M")
        else:
            return False
    return True


def _smem(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    smem = gluon_smem(g, p)
    return f"the Gluon rendering needs ~{smem} bytes of shared memory (> {t.smem_bytes})" if smem > t.smem_bytes \
        else None


def _less_smem(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """Fewer stages (down to 2), then narrower key blocks (down to 16); what is left over leaves the rendering."""
    for name, least in (("num_stages", 2), ("BLOCK_N", 16)):
        while gluon_smem(g, p) > t.smem_bytes and g[name] > least:
            family._step_down(g, name)
    return True


def _persistent(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    smem = gluon_smem(g, p)
    if smem <= t.smem_bytes and g["persistent"] * smem > t.smem_bytes:
        return (f"persistent {g['persistent']}: that many programs of ~{smem} bytes of shared memory do not fit one "
                "SM together")
    return None


def _fewer_programs(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    while g["persistent"] * gluon_smem(g, p) > t.smem_bytes and family._step_down(g, "persistent"):
        pass
    return True


# in the order violations report them
GLUON_RULES = (
    TARGET,
    Rule("gluon_head_dims", _head_dims, unmovable(_head_dims)),
    fixed_rule(GLUON_FIXED),
    consumer_rule(),
    Rule("gluon_pingpong", _pingpong, _no_pingpong),
    Rule("gluon_stages", _stages, _deeper),
    Rule("gluon_live", _live, _fewer_live),
    Rule("gluon_smem", _smem, _less_smem),
    Rule("gluon_persistent", _persistent, _fewer_programs),
    Rule("gluon_short", _short, unmovable(_short), hard=False),
)
# the order a genome moves into them: what no move settles, the fixed genes, the consumers, the ring, the registers,
# the shared memory; a genome that cannot be settled leaves, but its ping-pong and persistent grid are settled first
GLUON_PLAN = ("gluon_target", "gluon_head_dims", "gluon_short", "gluon_fixed", "gluon_consumers", "gluon_stages",
              "gluon_live", "gluon_smem")
_ALWAYS = ("gluon_pingpong", "gluon_persistent")


def gluon_violations(g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """Why the Gluon rendering cannot run `problem` on `target` with genome values `g` (empty when it can)."""
    return table_violations(GLUON_RULES, g, problem, target)


def gluon_steering(g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """What moves a genome that keeps the rendering's rules (short queries are Triton's)."""
    return steering(GLUON_RULES, g, problem, target)


def gluon_repair(family: Any, g: dict[str, Any], problem: Problem, target: Target) -> None:
    """Move `g` (backend=gluon) into the Gluon rendering's rules in place, with `family`'s moves; back to the Triton
    rendering (one consumer, no overlap) when one of them cannot be settled, or its shared memory stays too large."""
    settled = region_repair(family, GLUON_RULES, GLUON_PLAN, g, problem, target)
    region_repair(family, GLUON_RULES, _ALWAYS, g, problem, target)
    if not settled or gluon_smem(g, problem) > target.smem_bytes:
        family._set(g, "backend", "triton")
        family._set(g, "consumers", 1)
        family._set(g, "overlap", False)
        family._set(g, "pingpong", False)
