"""What every Gluon rendering of a genome needs (genomes/gemm_gluon.py, genomes/attention_gluon.py): a Hopper GPU
that runs it (wgmma and TMA are sm_90's; Triton's CPU interpreter runs no Gluon), 16-bit operands, the structure
genes the rendering holds fixed, and MMA consumers that are whole warp groups, each warp owning 16 rows of a
64-row wgmma tile. The violations name each rule in one line; the moves put a genome inside them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target

__all__ = ["GLUON_DTYPES", "ROWS_PER_WARP", "target_violations", "fixed_violations", "consumer_violations",
           "set_fixed", "move_to_consumers"]

GLUON_DTYPES = ("fp16", "bf16")
ROWS_PER_WARP = 16  # a wgmma warp group owns 64 rows: BLOCK_M >= 16 x a consumer's warps


def target_violations(problem: Problem, target: Target) -> list[str]:
    """Why no Gluon rendering runs `problem` on `target` (empty when one can)."""
    out = []
    if target.arch != 90:
        out.append(f"the Gluon rendering is Hopper's (wgmma, sm_90), not sm_{target.arch}")
    if target.interpreted:
        out.append("the Gluon rendering does not run in Triton's CPU interpreter")
    if problem.dtype not in GLUON_DTYPES:
        out.append(f"the Gluon rendering takes fp16 and bf16, not {problem.dtype}")
    return out


def fixed_violations(g: Mapping[str, Any], fixed: Mapping[str, Any]) -> list[str]:
    return [f"the Gluon rendering holds {name}={value}" for name, value in fixed.items() if g[name] != value]


def consumer_violations(g: Mapping[str, Any], two: str = "") -> list[str]:
    """The consumers' warps: one or two warp groups each, one warp group each when there are several (`two` names
    the two-consumer schedule in the message), and at least 16 rows of BLOCK_M per warp."""
    out = []
    if g["num_warps"] not in (4, 8):
        out.append(f"a Gluon consumer is one or two warp groups: num_warps=4 or 8, not {g['num_warps']}")
    if g["consumers"] >= 2 and g["num_warps"] != 4:
        out.append(f"{g['consumers']} Gluon consumers{two} are one warp group each: num_warps=4")
    if g["BLOCK_M"] < ROWS_PER_WARP * g["num_warps"]:
        out.append(f"BLOCK_M={g['BLOCK_M']} is under the {ROWS_PER_WARP * g['num_warps']} rows that "
                   f"{g['num_warps']} wgmma warps own")
    return out


def set_fixed(family: Any, g: dict[str, Any], fixed: Mapping[str, Any]) -> bool:
    """Set the genes the rendering holds fixed, in place; False when the family's domains leave one out."""
    return all(family._set(g, name, value) for name, value in fixed.items())


def move_to_consumers(family: Any, g: dict[str, Any]) -> bool:
    """Move `g`'s warps and BLOCK_M inside consumer_violations' rules, in place, with `family`'s moves; False
    when they cannot be (the caller then renders with Triton)."""
    if g["consumers"] >= 2 and not family._set(g, "num_warps", 4) and not family._set(g, "consumers", 1):
        return False
    if g["num_warps"] not in (4, 8) and not family._set(g, "num_warps", 4 if g["num_warps"] < 4 else 8):
        return False
    while g["BLOCK_M"] < ROWS_PER_WARP * g["num_warps"]:
        if not (g["num_warps"] == 8 and family._set(g, "num_warps", 4)) and not family._step_up(g, "BLOCK_M"):
            return False
    return True
