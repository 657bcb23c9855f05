"""The GEMM genome's rules (genomes/gemm.py): one table, each rule a check and its fix, read by `violations()` (in
the table's order) and `repair()` (in PLAN's order, once: genomes/rule_table.py).

Repair settles the tile against the problem first, then the backend (the Gluon rendering's region, or the Triton
rendering's own genes), the structures a coin chooses between (stream-K or a plain grid, split-K or a persistent
one, a wide tile or the features it refuses), the memory path, warp specialization, and last the resources
(accumulator registers, shared memory), whose fixes shrink tiles and stages; the rules those moves may break again
(K steps, the Gluon row split, wide tiles, the subtiled epilogue) are looked at once more after them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from evo.problem import Problem
from genomes.gemm_gluon import (
    ROWS_PLAN,
    gluon_repair,
    gluon_rules,
    gluon_smem,
    gluon_steering,
    gluon_violations,
    rows_unsettled,
)
from genomes.gemm_resources import (
    DESCRIPTOR_MEMORY,
    acc_regs_per_thread,
    column_blocks,
    descriptor_ok,
    max_acc_regs,
    next_pow2,
    smem_estimate,
    unaligned_rows,
)
from genomes.rule_table import Domains, Rule, domains, outside, region_repair

__all__ = ["MAX_WS_STAGES", "TWO_TILE_REFUSALS", "PLAN", "Moves", "rules", "smem_needed", "SPLIT_WORKSPACE_BYTES",
           "split_workspace_bytes"]

# Warp-specialized kernels with a 5-deep K pipeline (num_stages=5, 128x128x64, 4 warps) left part of the
# output unwritten in 2 of 6 evaluations on an H200 with triton 3.6 (a race: the same genome also passed);
# depths 3 and 4 were correct in all 32 evaluations. The evaluator caught both; the genome no longer offers it.
MAX_WS_STAGES = 4

# what a kernel with two B tiles per K step (SwiGLU: gate and up, two accumulators) is not combined with
TWO_TILE_REFUSALS = (("split_k", 1, "split-K (partials of two accumulators)"), ("stream_k", False, "stream-K"),
                     ("warp_specialize", False, "warp specialization"), ("pad_rows", False, "padded rows"))

# what a wide tile (two column blocks: BLOCK_N 96, 192 or 320) is not combined with: (name, gene, its off value);
# split-K only in the Triton kernel (its reduction sums one accumulator), not in Gluon's (_wide_refusals)
_WIDE_REFUSALS = (("split-K", "split_k", 1), ("stream-K", "stream_k", False),
                  ("warp specialization", "warp_specialize", False), ("a subtiled epilogue", "epilogue_subtile", False))

# warp specialization's conditions: (rule name, holds, why not); the stages and an epilogue's refusal have rules of
# their own (the stages' fix is shallower stages before no warp specialization)
_WS_CONDITIONS = (
    ("ws_arch", lambda g, p, t: t.arch == 90, "warp specialization is only enabled for sm_90"),
    # pointer loads fail to compile; host descriptors are not verified with it (3.6 notes: in-kernel only)
    ("ws_memory", lambda g, p, t: g["memory"] == "descriptor",
     "warp specialization needs in-kernel tensor descriptors (memory=descriptor)"),
    ("ws_warps", lambda g, p, t: g["num_warps"] == 4,
     "warp specialization needs num_warps=4 on Hopper (8 is silently ignored)"),
    ("ws_persistent", lambda g, p, t: not g["persistent"],
     "warp specialization is not combined with a persistent grid"),
    ("ws_tile", lambda g, p, t: (g["BLOCK_M"], g["BLOCK_N"]) != (64, 256),
     "warp specialization fails to compile 64x256 tiles"),
    # Triton 3.6 on an H200: 32x32 B tiles left 32-3,456 of 4096^3's outputs unwritten on some runs and not others
    # (a race: 3 of 12 such genomes; every one of 40 with larger B tiles correct 3 times; tools/probe_warp_specialize)
    ("ws_b_tile", lambda g, p, t: g["BLOCK_N"] * g["BLOCK_K"] >= 2048,
     "warp specialization raced with B tiles under 2048 elements (BLOCK_N x BLOCK_K)"),
    # Hopper warp specialization copies the split-K arrival atomic into each consumer partition (seen in Triton
    # 3.9's TTGIR), so a program would count as two arrivals
    ("ws_split", lambda g, p, t: g["split_k"] == 1, "warp specialization is not combined with split-K"),
    ("ws_unroll", lambda g, p, t: g["loop_unroll"] == 1,  # Triton 3.9: UNREACHABLE in WSDataPartition
     "warp specialization fails to compile an unrolled K loop"),
    ("ws_fp32", lambda g, p, t: p.dtype != "fp32",  # Triton 3.9: "WGMMA type or shape is not supported" for tf32
     "warp specialization fails to compile fp32 (tf32) dots"),
    ("ws_subtile", lambda g, p, t: not g["epilogue_subtile"],  # Triton 3.6 (not 3.9): "PassManager::run failed"
     "warp specialization fails to compile a subtiled epilogue in Triton 3.6"),
)

# bytes of fp32 partial tiles a split-K plan may allocate (the padded output times the splits): tens of splits pay
# off where the output is small (under 1k x 1k: 4 MiB of fp32 per split); a 4096 x 4096 output keeps the 16 splits
# the domain offered before it reached 128 (1 GiB), not the 8 GiB of 128
SPLIT_WORKSPACE_BYTES = 1 << 30

# the order repair settles the rules in (see the module's docstring); some are looked at again after the resources
PLAN = ("fits_BLOCK_M", "fits_BLOCK_N", "fits_BLOCK_K", "split_has_steps", "split_workspace", "gluon",
        "triton_consumers", "triton_rows", "two_tiles_refusals", "two_tiles_wide", "stream_k_persistent",
        "split_k_persistent", "pad_rows", "descriptors",
        "wide_alone", *(name for name, _, _ in _WS_CONDITIONS), "ws_refusal", "ws_stages", "subtile_width",
        "registers", "smem", "split_has_steps", "rows_settled", "wide_narrowed", "subtile_width")


def smem_needed(g: Mapping[str, Any], dtype: str, b_tiles: int = 1, reads_tile: bool = False) -> int:
    """Shared memory of the genome's rendering: the Gluon kernel's (gemm_gluon.gluon_smem) or the Triton one's
    (gemm_resources.smem_estimate, with `b_tiles` B tiles per K step and an epilogue that reads a tile or not)."""
    return gluon_smem(g, dtype) if g["backend"] == "gluon" else smem_estimate(g, dtype, b_tiles, reads_tile)


def _k_steps(g: Mapping[str, Any], p: Problem) -> int:
    return -(-p.dims["K"] // g["BLOCK_K"])


def _wide(g: Mapping[str, Any]) -> bool:
    return len(column_blocks(g["BLOCK_N"])) > 1


def _wide_refusals(g: Mapping[str, Any]) -> tuple[tuple[str, str, Any], ...]:
    # the Gluon rendering's split-K stores each column block's partial from its own accumulator
    return tuple(r for r in _WIDE_REFUSALS if not (r[1] == "split_k" and g["backend"] == "gluon"))


def _wide_refused(g: Mapping[str, Any]) -> list[str]:
    if not _wide(g):
        return []
    return [f"BLOCK_N={g['BLOCK_N']} (two column blocks) is not combined with {what}"
            for what, gene, off in _wide_refusals(g) if g[gene] != off]


class Moves:
    """What a fix moves genes with: the family's moves (`_step_down`, `_step_up`, `_set`), and the coin of the repair
    that runs it (the fixes that choose between two structures draw it from the repair's generator)."""

    def __init__(self, family: Any, rng: np.random.Generator) -> None:
        self.family, self.rng = family, rng

    def __getattr__(self, name: str) -> Any:
        return getattr(self.family, name)

    def coin(self) -> float:
        return float(self.rng.random())


def rules(family: Any) -> tuple[Rule, ...]:
    """The table of `family` (a GemmFamily: its B tiles, epilogue and refusals), in the order violations() reports
    it; repair runs its fixes with `Moves` (its coins)."""
    table = family.__dict__.get("_rules")
    if table is None:  # kept (a family's genes and settings are fixed once made), but not pickled: GemmFamily
        table = family._rules = _table(family.b_tiles, family.reads_tile, family.ws_refusal, family._gluon_refusal(),
                                       domains(family))
    return table


# -- the rules' checks and fixes: a check (g, p, t) names what is wrong, a fix (fam, g, p, t) moves genes ----------
def _fits(gene: str, dim: str) -> Rule:
    def check(g, p, t):
        if g[gene] > max(16, next_pow2(p.dims[dim])):
            return f"{gene}={g[gene]} exceeds {dim}={p.dims[dim]} rounded up to a power of two"
        return None
    return Rule(f"fits_{gene}", check, lambda fam, g, p, t: fam._step_down(g, gene))


def _split_has_steps(g, p, t):
    return f"split_k={g['split_k']} exceeds the {_k_steps(g, p)} K steps" if g["split_k"] > _k_steps(g, p) else None


def split_workspace_bytes(g: Mapping[str, Any], p: Problem) -> int:
    """fp32 bytes of the partial tiles a split-K genome's plan allocates (0 without split-K): one per split of every
    padded output tile (the Triton kernel's group sums, beyond 16 splits, add an eighth more)."""
    if g["split_k"] == 1:
        return 0
    rows = -(-p.dims["M"] // g["BLOCK_M"]) * g["BLOCK_M"]
    cols = -(-p.dims["N"] // g["BLOCK_N"]) * g["BLOCK_N"]
    return 4 * rows * cols * g["split_k"]


def _split_workspace(g, p, t):
    need = split_workspace_bytes(g, p)
    if need > SPLIT_WORKSPACE_BYTES:
        return f"split_k={g['split_k']} needs {need >> 20} MiB of fp32 partials (> {SPLIT_WORKSPACE_BYTES >> 20} MiB)"
    return None


def _gluon(g, p, t, gluon_table):
    return gluon_violations(gluon_table, g, p, t) if g["backend"] == "gluon" else []


def _gluon_steer(g, p, t, gluon_table, family_domains):
    return gluon_steering(gluon_table, g, p, t) + outside(family_domains, g) if g["backend"] == "gluon" else []


def _fix_gluon(fam, g, p, t, gluon_table):
    gluon_repair(fam, gluon_table, g, p, t)
    return False


def _triton_consumers(g, p, t):
    if g["backend"] == "triton" and (g["consumers"] != 1 or g["consumer_split"] != "tiles"):
        return "consumers and consumer_split are genes of the Gluon rendering: 1 and tiles under backend=triton"
    return None


def _fix_triton_consumers(fam, g, p, t):
    fam._set(g, "consumers", 1)
    fam._set(g, "consumer_split", "tiles")
    return False


def _triton_rows(g, p, t):
    if g["backend"] == "triton" and g["BLOCK_M"] == 192:
        return "BLOCK_M=192 is three Gluon consumers of 64 rows (backend=gluon, consumer_split=rows)"
    return None


def _split_k_persistent(g, p, t):
    if g["split_k"] > 1 and g["persistent"] and g["backend"] == "triton":
        return "split_k > 1 is not combined with a persistent grid"
    return None


def _fix_split_k_persistent(fam, g, p, t):
    # keep whichever structure the coin favours, if the domain allows dropping the other
    if fam.coin() < 0.5 and fam._set(g, "persistent", False):
        fam._set(g, "stream_k", False)
    elif not fam._set(g, "split_k", 1):
        fam._set(g, "persistent", False)
        fam._set(g, "stream_k", False)
    return False


def _stream_k_persistent(g, p, t):
    return "stream_k needs a persistent grid" if g["stream_k"] and not g["persistent"] else None


def _fix_stream_k_persistent(fam, g, p, t):
    # stream-K was just turned on (or persistence off): the coin keeps one of the two
    keep = fam.coin() < 0.5 and g["split_k"] == 1 and not g["warp_specialize"]
    if not (keep and fam._set(g, "persistent", True)):
        fam._set(g, "stream_k", False)
    return False


def _descriptors(g, p, t):
    if g["memory"] in DESCRIPTOR_MEMORY and not descriptor_ok(g, p, t):
        return "tensor descriptors need sm_90+ and row strides that are multiples of 16 bytes"
    return None


def _fix_descriptors(fam, g, p, t, b_tiles):
    if g["memory"] == "host_descriptor" and t.arch >= 90 and b_tiles == 1:
        fam._set(g, "pad_rows", True)  # the padded copy keeps the TMA path for unaligned rows
    if _descriptors(g, p, t) is not None:
        fam._set(g, "memory", "pointer")
        fam._set(g, "pad_rows", False)
    return False


def _pad_rows(g, p, t):
    out = []
    if g["pad_rows"] and g["memory"] != "host_descriptor":
        out.append("pad_rows needs host tensor descriptors (memory=host_descriptor)")
    if g["pad_rows"] and not unaligned_rows(p):
        out.append("pad_rows changes nothing when every row is a multiple of 16 bytes")
    return out


def _fix_wide_alone(fam, g, p, t):
    # a wide tile and a feature it is not combined with: the coin keeps one of the two
    keep_wide = fam.coin() < 0.5 and all(fam._set(g, gene, off) for _, gene, off in _wide_refusals(g))
    while not keep_wide and _wide(g) and fam._step_down(g, "BLOCK_N"):
        pass
    return False


def _ws_condition(name: str, ok: Any, why: str) -> Rule:
    return Rule(name, lambda g, p, t: why if g["warp_specialize"] and not ok(g, p, t) else None, _no_ws)


def _no_ws(fam, g, p, t):
    fam._set(g, "warp_specialize", False)
    return False


def _ws_stages(g, p, t):
    if g["warp_specialize"] and (g["loop_stages"] or g["num_stages"]) > MAX_WS_STAGES:
        return f"warp specialization deeper than {MAX_WS_STAGES} stages left outputs unwritten"
    return None


def _fix_ws_stages(fam, g, p, t):
    if fam._step_down(g, "loop_stages" if g["loop_stages"] else "num_stages"):
        return True
    return _no_ws(fam, g, p, t)


def _ws_refused(g, p, t, ws_refusal):
    return f"warp specialization {ws_refusal}" if g["warp_specialize"] and ws_refusal else None


def _subtile_width(g, p, t):
    return "epilogue subtiling needs BLOCK_N >= 32" if g["epilogue_subtile"] and g["BLOCK_N"] < 32 else None


def _two_tiles_refusals(g, p, t, b_tiles):
    if b_tiles == 1:
        return []
    return [f"two B tiles per K step (SwiGLU) are not combined with {what}"
            for gene, off, what in TWO_TILE_REFUSALS if g[gene] != off]


def _fix_two_tiles_refusals(fam, g, p, t):
    for gene, off, _ in TWO_TILE_REFUSALS:
        fam._set(g, gene, off)
    return False


def _two_tiles_wide(g, p, t, b_tiles):
    if b_tiles > 1 and _wide(g):
        return f"two B tiles per K step (SwiGLU) are not combined with BLOCK_N={g['BLOCK_N']}"
    return None


def _registers(g, p, t, b_tiles):
    regs, most = acc_regs_per_thread(g, b_tiles), max_acc_regs(g)
    return f"accumulator needs {regs} registers per thread (> {most})" if regs > most else None


def _fix_registers(fam, g, p, t):
    """More warps (one consumer, no warp specialization; in Gluon only where the rows hold 16 a warp), else a smaller
    tile, its longer side first."""
    more_warps = not g["warp_specialize"] and g["consumers"] == 1
    if g["backend"] == "gluon":  # (a 64x320 Gluon tile: 8 warps would own 128 rows; it narrows instead)
        more_warps = more_warps and g["BLOCK_M"] >= 16 * 2 * g["num_warps"]
    if more_warps and fam._step_up(g, "num_warps"):
        return True
    big = "BLOCK_M" if g["BLOCK_M"] >= g["BLOCK_N"] else "BLOCK_N"
    return fam._step_down(g, big) or fam._step_down(g, "BLOCK_M" if big == "BLOCK_N" else "BLOCK_N")


def _smem(g, p, t, b_tiles, reads_tile):
    need = smem_needed(g, p.dtype, b_tiles, reads_tile)
    return f"needs ~{need} bytes of shared memory (> {t.smem_bytes})" if need > t.smem_bytes else None


def _fix_smem(fam, g, p, t):
    """The first that can shrink of: unrolling, stages, the K loop's own stages (0 stays), then the tile."""
    for name in ("loop_unroll", "num_stages", "loop_stages", "BLOCK_K", "BLOCK_N", "BLOCK_M"):
        if not (name == "loop_stages" and g["loop_stages"] == 0) and fam._step_down(g, name):
            return True
    return False


def _rows_unsettled(g, p, t, gluon_table, family_domains):
    if g["backend"] != "gluon":
        return []
    return rows_unsettled(gluon_table, g, p, t) + outside(family_domains, g)


def _settle_rows(fam, g, p, t, gluon_table):
    region_repair(fam, gluon_table, ROWS_PLAN, g, p, t)
    return False


def _step_down(gene: str) -> Any:
    return lambda fam, g, p, t: fam._step_down(g, gene)


def _set_once(gene: str, value: Any) -> Any:
    return lambda fam, g, p, t: fam._set(g, gene, value) and False


@functools.lru_cache(maxsize=64)
def _table(b_tiles: int, reads_tile: bool, ws_refusal: str, refusal: str, family_domains: Domains
           ) -> tuple[Rule, ...]:
    gluon_table = gluon_rules(refusal)
    return (
        _fits("BLOCK_M", "M"), _fits("BLOCK_N", "N"), _fits("BLOCK_K", "K"),
        Rule("split_has_steps", _split_has_steps, _step_down("split_k")),
        Rule("split_workspace", _split_workspace, _step_down("split_k")),
        Rule("gluon", partial(_gluon, gluon_table=gluon_table), partial(_fix_gluon, gluon_table=gluon_table),
             steer=partial(_gluon_steer, gluon_table=gluon_table, family_domains=family_domains)),
        Rule("triton_consumers", _triton_consumers, _fix_triton_consumers),
        Rule("triton_rows", _triton_rows, lambda fam, g, p, t: fam._step_down(g, "BLOCK_M") and False),
        Rule("split_k_persistent", _split_k_persistent, _fix_split_k_persistent),
        Rule("stream_k_persistent", _stream_k_persistent, _fix_stream_k_persistent),
        Rule("descriptors", _descriptors, partial(_fix_descriptors, b_tiles=b_tiles)),
        Rule("pad_rows", _pad_rows, _set_once("pad_rows", False)),
        Rule("wide_alone", lambda g, p, t: _wide_refused(g), _fix_wide_alone),
        *(_ws_condition(name, ok, why) for name, ok, why in _WS_CONDITIONS[:3]),
        Rule("ws_stages", _ws_stages, _fix_ws_stages),
        *(_ws_condition(name, ok, why) for name, ok, why in _WS_CONDITIONS[3:]),
        Rule("subtile_width", _subtile_width, _set_once("epilogue_subtile", False)),
        Rule("two_tiles_refusals", partial(_two_tiles_refusals, b_tiles=b_tiles), _fix_two_tiles_refusals),
        Rule("two_tiles_wide", partial(_two_tiles_wide, b_tiles=b_tiles), _step_down("BLOCK_N")),
        Rule("registers", partial(_registers, b_tiles=b_tiles), _fix_registers),
        Rule("ws_refusal", partial(_ws_refused, ws_refusal=ws_refusal), _no_ws),
        Rule("smem", partial(_smem, b_tiles=b_tiles, reads_tile=reads_tile), _fix_smem),
        # looked at again after the resources' fixes moved the tile (not reported twice: their rules above report)
        Rule("rows_settled", partial(_rows_unsettled, gluon_table=gluon_table, family_domains=family_domains),
             partial(_settle_rows, gluon_table=gluon_table), hard=False),
        Rule("wide_narrowed", lambda g, p, t: _wide_refused(g), _step_down("BLOCK_N"), hard=False),
    )
