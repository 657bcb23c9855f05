"""The attention genome's rules (genomes/attention.py): one table, each rule a check and its fix, read by
`violations()` (in the table's order) and `repair()` (in PLAN's order, once: genomes/rule_table.py).

A Gluon genome keeps the Gluon rendering's rules (genomes/attention_gluon.py: one rule here, its fix moving the genome
inside them or back to Triton); the others are the Triton rendering's, each holding for a Gluon genome. Repair
settles the structure genes first (packing, the tile against the rows and keys), then the resources (registers,
threads, shared memory, a persistent grid's programs per SM), then the key split and the genes that follow it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from evo.problem import Problem, Target
from genomes.attention_gluon import gluon_repair, gluon_steering, gluon_violations
from genomes.attention_resources import (
    ELEM_BYTES,
    group,
    key_blocks,
    live_limit,
    live_values,
    next_pow2,
    smem_estimate,
    tile_rows,
)
from genomes.rule_table import Rule, domains, outside

__all__ = ["PLAN", "rules", "model_switches"]

PLAN = ("triton_only", "gluon", "triton_genes", "pack_gqa", "block_m_rows", "block_n_keys", "registers", "threads",
        "smem", "persistent_smem", "kv_split_blocks", "reduce", "tma_rows")


def _triton(check: Callable[[Mapping[str, Any], Problem, Target], str | None]
            ) -> Callable[[Mapping[str, Any], Problem, Target], str | None]:
    """`check` for the Triton rendering: a Gluon genome keeps it (the Gluon rule judges those)."""
    return lambda g, p, t: check(g, p, t) if g["backend"] == "triton" else None


def model_switches(problem: Problem) -> list[str]:
    """The options of `problem`'s operator that only the Triton kernel implements (a model's logit cap and sliding
    window: attention+causal+softcap50+window4096 -> ['softcap50', 'window4096'])."""
    return [o for o in problem.operator.split("+")[1:] if o.startswith(("softcap", "window"))]

def _triton_only(g, p, t):
    found = model_switches(p)
    if g["backend"] == "gluon" and found:
        return (f"backend gluon: {' and '.join(found)} are switches of the Triton kernel only (SOFTCAP and WINDOW; "
                "the Gluon kernel has neither)")
    return None

def _fix_triton_only(fam, g, p, t):
    fam._set(g, "backend", "triton")
    return False

def _gluon(g, p, t):
    return gluon_violations(g, p, t) if g["backend"] == "gluon" else []

def _gluon_steer(g, p, t, family_domains):
    return gluon_steering(g, p, t) + outside(family_domains, g) if g["backend"] == "gluon" else []

def _fix_gluon(fam, g, p, t):
    gluon_repair(fam, g, p, t)
    return False

def _triton_genes(g, p, t):
    if g["consumers"] != 1 or g["overlap"] or g["pingpong"]:
        return ("consumers, overlap and pingpong are genes of the Gluon rendering: 1, False and False under "
                "backend=triton")
    return None

def _fix_triton_genes(fam, g, p, t):
    fam._set(g, "consumers", 1)
    fam._set(g, "overlap", False)
    fam._set(g, "pingpong", False)
    return False

def _registers(g, p, t):
    values, limit = live_values(g, p), live_limit(g["num_warps"])
    if values > limit:
        return (f"keeps ~{values} fp32 values per thread (> {limit} at {g['num_warps']} warps): smaller tiles or "
                "other warps")
    return None

def _fix_registers(fam, g, p, t):
    """More warps where that fits the values (or lowers them, up to 8 warps), else a narrower, then shorter tile."""
    trial = dict(g)
    if fam._step_up(trial, "num_warps") and (live_values(trial, p) <= live_limit(trial["num_warps"])
                                             or live_values(trial, p) < live_values(g, p) and trial["num_warps"] <= 8):
        g.update(trial)
        return True
    return fam._step_down(g, "BLOCK_N") or fam._step_down(g, "BLOCK_M")

def _threads(g, p, t):
    if g["BLOCK_M"] * g["BLOCK_N"] < 32 * g["num_warps"] * 4:
        return f"a {g['BLOCK_M']}x{g['BLOCK_N']} tile is too small for {g['num_warps']} warps"
    return None

def _smem(g, p, t):
    need = smem_estimate(g, p)
    return f"needs ~{need} bytes of shared memory (> {t.smem_bytes})" if need > t.smem_bytes else None

def _fix_smem(fam, g, p, t):
    return any(fam._step_down(g, name) for name in ("num_stages", "BLOCK_N", "BLOCK_M"))

def _persistent_smem(g, p, t):
    need = smem_estimate(g, p)
    if need <= t.smem_bytes and g["persistent"] > 1 and g["persistent"] * need > t.smem_bytes:
        return (f"persistent {g['persistent']}: that many programs of ~{need} bytes of shared memory do not fit "
                "one SM together")
    return None

def _persistent_steer(g, p, t):  # (a program too large alone is the smem rule's; repair still steps down)
    need = smem_estimate(g, p)
    if need > t.smem_bytes and g["persistent"] > 1:
        return f"persistent {g['persistent']} programs of ~{need} bytes"
    return None

def _pack_gqa(g, p, t):
    return "pack_gqa: every query head has its own KV head, there is nothing to pack" \
        if g["pack_gqa"] and group(p) == 1 else None

def _reduce(g, p, t, first_reduce):
    return "reduce: only a kv_split > 1 has partials to combine" \
        if g["kv_split"] == 1 and g["reduce"] != first_reduce else None

def _tma_rows(g, p, t):
    if g["kv_load"] == "tma" and p.dims["head_dim"] * ELEM_BYTES[p.dtype] % 16:
        return f"kv_load tma: rows of head_dim {p.dims['head_dim']} are not 16-byte multiples"
    return None

# wasteful but valid (a genome stays valid for a shorter problem): repair aims at the sensible forms
def _block_m_rows(g, p, t):
    rows = next_pow2(tile_rows(g, p))
    return f"BLOCK_M={g['BLOCK_M']} is taller than {rows} rows" if g["BLOCK_M"] > max(16, rows) else None

def _block_n_keys(g, p, t):
    keys = next_pow2(p.dims["kv_len"])
    return f"BLOCK_N={g['BLOCK_N']} is wider than {keys} keys" if g["BLOCK_N"] > max(16, keys) else None

def _kv_split_blocks(g, p, t):
    blocks = key_blocks(g, p)
    return f"kv_split={g['kv_split']} exceeds the {blocks} key blocks" if g["kv_split"] > blocks else None


def _step_down(gene: str) -> Callable[..., bool]:
    return lambda fam, g, p, t: fam._step_down(g, gene)


def rules(family: Any) -> tuple[Rule, ...]:
    """The table of `family` (an AttentionFamily: its `reduce` domain), in the order violations() reports it."""
    first_reduce = family.genes["reduce"].values[0]
    return (
        Rule("triton_only", _triton_only, _fix_triton_only),
        Rule("gluon", _gluon, _fix_gluon, steer=partial(_gluon_steer, family_domains=domains(family))),
        Rule("triton_genes", _triton(_triton_genes), _fix_triton_genes),
        Rule("registers", _triton(_registers), _fix_registers),
        Rule("threads", _triton(_threads), _step_down("num_warps")),
        Rule("smem", _triton(_smem), _fix_smem),
        Rule("persistent_smem", _triton(_persistent_smem), _step_down("persistent"), steer=_triton(_persistent_steer)),
        Rule("pack_gqa", _triton(_pack_gqa), lambda fam, g, p, t: fam._set(g, "pack_gqa", False) and False),
        Rule("reduce", _triton(partial(_reduce, first_reduce=first_reduce)),
             lambda fam, g, p, t: fam._set(g, "reduce", first_reduce) and False),
        Rule("tma_rows", _triton(_tma_rows), lambda fam, g, p, t: fam._set(g, "kv_load", "pointer") and False),
        Rule("block_m_rows", _triton(_block_m_rows), _step_down("BLOCK_M"), hard=False),
        Rule("block_n_keys", _triton(_block_n_keys), _step_down("BLOCK_N"), hard=False),
        Rule("kv_split_blocks", _triton(_kv_split_blocks), _step_down("kv_split"), hard=False),
    )
