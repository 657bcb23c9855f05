"""What every Gluon rendering of a genome needs (genomes/gemm_gluon.py, genomes/attention_gluon.py): a Hopper GPU
that runs it (wgmma and TMA are sm_90's; Triton's CPU interpreter runs no Gluon), 16-bit operands, the structure
genes the rendering holds fixed, and MMA consumers that are whole warp groups, each warp owning 16 rows of a
64-row wgmma tile. Each is a rule (genomes/rule_table.py): its check names what is wrong in one line each, its fix
puts a genome inside it, or says it cannot (the genome then leaves the Gluon rendering)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target
from genomes.rule_table import Rule, unmovable

__all__ = ["GLUON_DTYPES", "ROWS_PER_WARP", "TARGET", "target_violations", "fixed_rule", "consumer_rule"]

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


def _target(g: Mapping[str, Any], p: Problem, t: Target) -> list[str]:
    return target_violations(p, t)


TARGET = Rule("gluon_target", _target, unmovable(_target))


def fixed_rule(fixed: Mapping[str, Any]) -> Rule:
    """The structure genes a rendering holds at `fixed` values; its fix sets them (it cannot where the family's
    domains leave a value out)."""
    def check(g: Mapping[str, Any], p: Problem, t: Target) -> list[str]:
        return [f"the Gluon rendering holds {name}={value}" for name, value in fixed.items() if g[name] != value]

    def fix(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
        return all(family._set(g, name, value) for name, value in fixed.items())

    return Rule("gluon_fixed", check, fix)


def consumer_rule(two: str = "") -> Rule:
    """The consumers' warps: one or two warp groups each, one warp group each when there are several (`two` names
    the two-consumer schedule in the message), and at least 16 rows of BLOCK_M per warp. Its fix moves warps, then
    BLOCK_M; it cannot when the domains allow neither."""
    def check(g: Mapping[str, Any], p: Problem, t: Target) -> list[str]:
        out = []
        if g["num_warps"] not in (4, 8):
            out.append(f"a Gluon consumer is one or two warp groups: num_warps=4 or 8, not {g['num_warps']}")
        if g["consumers"] >= 2 and g["num_warps"] != 4:
            out.append(f"{g['consumers']} Gluon consumers{two} are one warp group each: num_warps=4")
        if g["BLOCK_M"] < ROWS_PER_WARP * g["num_warps"]:
            out.append(f"BLOCK_M={g['BLOCK_M']} is under the {ROWS_PER_WARP * g['num_warps']} rows that "
                       f"{g['num_warps']} wgmma warps own")
        return out

    def fix(family: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
        if g["consumers"] >= 2 and not family._set(g, "num_warps", 4) and not family._set(g, "consumers", 1):
            return False
        if g["num_warps"] not in (4, 8) and not family._set(g, "num_warps", 4 if g["num_warps"] < 4 else 8):
            return False
        while g["BLOCK_M"] < ROWS_PER_WARP * g["num_warps"]:
            if not (g["num_warps"] == 8 and family._set(g, "num_warps", 4)) and not family._step_up(g, "BLOCK_M"):
                return False
        return True

    return Rule("gluon_consumers", check, fix)
