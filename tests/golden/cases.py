"""Which renderings are kept as goldens: every operator and variant on a few shapes (unaligned ones too), the seeds of
its genome family plus seeded random valid genomes, one genome per schedule on each problem.

A genome's schedule is the set of its structure genes that change the code a renderer writes (backend, memory path,
grid, split-K, stream-K, row split, warp roles, padding, ...), named by `schedule()`: two genomes of one schedule
differ only in numbers (tile sizes, warps, stages), so one of them stands for both. `select()` runs on
`python -m tests.golden.regenerate --select`; the chosen genomes are then kept in the manifest, so the goldens
test the renderers alone, whatever later changes to seeds, repair or random draws would pick.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evo.problem import HOPPER, Problem, Target
from genomes.base import Genome, InvalidGenome

__all__ = ["PROBLEMS", "EXPORTED", "RANDOM_DRAWS", "Case", "schedule", "select"]

# operator name -> (sizes, dtype, most genomes kept) of its problems: aligned and unaligned shapes, each dtype the
# operator takes. The GEMM's epilogue variants keep fewer: what they add is the epilogue's text on GEMM schedules.
PROBLEMS: dict[str, list[tuple[tuple[int, ...], str, int]]] = {
    "gemm": [((4096, 4096, 4096), "bf16", 16), ((1000, 3001, 588), "bf16", 13), ((16, 4096, 8192), "fp16", 12),
             ((512, 768, 1000), "fp32", 10)],
    "gemm+bias": [((2048, 2048, 2048), "fp16", 3)],
    "gemm+bias+gelu": [((4096, 4096, 4096), "bf16", 6), ((1000, 3001, 588), "fp16", 6)],
    "gemm+gelu_tanh": [((1024, 1024, 512), "bf16", 3)],
    "gemm+silu": [((1024, 1024, 512), "fp16", 3)],
    "gemm+relu+residual": [((1024, 1024, 512), "bf16", 4)],
    "gemm+residual": [((333, 1000, 777), "fp32", 4)],
    "gemm+swiglu": [((2048, 2048, 1024), "bf16", 6), ((100, 1000, 600), "fp16", 4)],
    "gemm+swiglu+residual": [((1024, 1024, 1024), "bf16", 3)],
    "gemm+geglu": [((2048, 14336, 3584), "bf16", 4), ((100, 1000, 600), "fp16", 3)],  # Gemma-2-9B's gate_up
    "gemm+scale+bias+gelu+residual": [((1024, 1024, 1024), "fp16", 4)],
    "softmax": [((4096, 4096), "bf16", 8), ((7, 50257), "fp16", 8), ((4096, 1000), "fp32", 6)],
    "rmsnorm": [((4096, 4096), "bf16", 8), ((3, 100000), "fp16", 8), ((4096, 1000), "fp32", 6)],
    "attention": [((1, 32, 8, 4096, 4096, 128), "bf16", 9), ((2, 8, 8, 1, 1000, 64), "fp16", 8),
                  ((1, 12, 12, 333, 333, 80), "fp16", 8)],
    "attention+causal": [((1, 32, 8, 4096, 4096, 128), "bf16", 7), ((2, 16, 4, 100, 1000, 64), "fp16", 8)],
    # Gemma 2's attention (head dim 256): the logit cap alone (its decode), the cap and the window (a prefill past it)
    "attention+causal+softcap50": [((1, 16, 8, 1, 4097, 256), "bf16", 4)],
    "attention+causal+softcap50+window4096": [((1, 16, 8, 300, 5000, 256), "bf16", 5)],
    "linear": [((1, 4096, 4096), "bf16", 6), ((7, 3000, 1000), "fp16", 4), ((16, 1024, 512), "fp32", 3)],
    "linear+residual": [((4, 4096, 4096), "bf16", 2)],
    "linear+swiglu": [((2, 2048, 4096), "fp16", 2)],
    "linear+rmsnorm": [((1, 4096, 4096), "bf16", 2)],
    "linear+rmsnorm+swiglu": [((3, 1000, 600), "bf16", 3)],
    "linear+geglu": [((1, 14336, 3584), "bf16", 2)],
    "linear+rmsnorm+geglu": [((3, 1000, 600), "bf16", 2)],
    "rope_cache": [((1, 32, 8, 128, 4096), "bf16", 6), ((333, 12, 4, 80, 2048), "fp16", 6),
                   ((16, 8, 8, 64, 1000), "fp32", 4)],
    "moe_gate_up": [((16, 8, 2, 14336, 4096), "bf16", 2)],
    "moe_down": [((2048, 8, 2, 4096, 14336), "bf16", 2)],
    "cache_attention": [((1, 32, 8, 1, 4097, 128), "bf16", 3)],
    "cache_attention+softcap50": [((1, 16, 8, 1, 4097, 256), "bf16", 3)],  # Gemma-2-9B's decode step
    "rmsnorm+residual": [((16, 4096), "bf16", 3), ((5, 77), "fp32", 3)],  # a decoder's add_norm
    "fp8_gemm": [((2048, 4096, 4096), "bf16", 4), ((16, 4096, 4096), "fp16", 3)],
    "fp8_gemm+channel": [((16, 14336, 4096), "bf16", 3), ((1000, 3000, 1000), "fp16", 3)],
    "fp8_gemm+block": [((2048, 4096, 4096), "bf16", 3), ((7, 1000, 384), "bf16", 3)],
}
# operators whose first seed on each problem is also rendered as the module `evo export` writes (header, kernel,
# self-check)
EXPORTED = ("gemm", "gemm+bias+gelu", "gemm+swiglu", "gemm+geglu", "softmax", "rmsnorm", "attention",
            "attention+causal", "linear", "rope_cache", "rmsnorm+residual")
RANDOM_DRAWS = 60  # random genomes drawn per problem (seeded by the problem), after its family's seeds
TARGET: Target = HOPPER


@dataclass(frozen=True)
class Case:
    """One golden: a genome of `operator` rendered for `problem` (`export`: as the module `evo export` writes)."""

    operator: str
    problem: Problem
    genome: Genome
    schedule: str
    origin: str  # "seed N" or "random N": where the selection found it
    export: bool = False

    @property
    def file(self) -> str:
        """The golden's path under tests/golden/files/."""
        kind = "export" if self.export else self.schedule
        return f"{self.operator}/{self.problem.shape_text}-{self.problem.dtype}/{kind}.py.golden"


def _gemm(g: Mapping[str, Any]) -> list[str]:
    if g["backend"] == "gluon":
        split = {"tiles": "pingpong", "rows": "rowsplit"}[g["consumer_split"]]
        parts = ["gluon", f"{g['consumers']}{split}" if g["consumers"] > 1 else "coop"]
    else:
        parts = [{"pointer": "ptr", "descriptor": "tma", "host_descriptor": "hosttma"}[g["memory"]]]
        parts += ["ws"] * g["warp_specialize"] + ["persistent"] * g["persistent"] + ["subtile"] * g["epilogue_subtile"]
        parts += ["loop"] * bool(g["loop_stages"] or g["loop_unroll"] > 1)
    parts += ["streamk"] * g["stream_k"] + ["splitk"] * (g["split_k"] > 1) + ["pad"] * g["pad_rows"]
    return parts + ["wide"] * (g["BLOCK_N"] & (g["BLOCK_N"] - 1) != 0) + ["col"] * (g["raster"] == "col")


def _rowwise(g: Mapping[str, Any]) -> list[str]:
    parts = [g["mode"]] + ["rows"] * (g["ROWS"] > 1) + ["persistent"] * (g["persistent"] > 0)
    parts += [f"split-{g['split_mode']}"] * (g["split"] > 1) + ["lane"] * (g.get("stats") == "lane")
    hints = [g[k] != "none" for k in ("evict_x", "store_y", "keep_x", "evict_w") if k in g]
    return parts + ["hints"] * any(hints)


def _attention(g: Mapping[str, Any]) -> list[str]:
    parts = [g["backend"]]
    if g["backend"] == "gluon":
        parts += [f"{g['consumers']}c"] + ["overlap"] * g["overlap"] + ["pingpong"] * g["pingpong"]
    parts += ["gqa"] * g["pack_gqa"] + [f"kvsplit-{g['reduce']}"] * (g["kv_split"] > 1)
    parts += ["masked"] * (g["mask_loop"] == "masked") + ["reverse"] * (g["q_order"] == "reverse")
    parts += ["headsfirst"] * (g["grid"] == "heads_first") + ["tma"] * (g["kv_load"] == "tma")
    return parts + ["persistent"] * (g["persistent"] > 0)


_SCHEDULES = {"gemm": _gemm, "softmax": _rowwise, "rmsnorm": _rowwise, "attention": _attention}
_SIZES = ("BLOCK", "num_warps", "num_stages")  # genes that are sizes, never a structure (by name prefix)


def _generic(genome: Genome, family: Any) -> list[str]:
    """A family _SCHEDULES does not name: each choice or switch away from its gene's first value, and each count that
    starts at 0 or 1 (a split, a persistent grid) above it; sizes (tiles, warps, stages) are left out."""
    parts = []
    for name, gene in sorted(family.genes.items()):
        value, first = genome[name], gene.values[0]
        if isinstance(value, bool) or isinstance(value, str):
            parts += [name if value is True else str(value)] * (value != first)
        elif not name.startswith(_SIZES) and min(gene.values) in (0, 1) and value > min(gene.values):
            parts.append(name.lower())
    return parts or ["plain"]


def schedule(genome: Genome, family: Any = None) -> str:
    """The genome's schedule as a file name: its structure genes, e.g. `gluon-2pingpong-wide`,
    `looped-split-cooperative` (`family`: the genome's, for the generic form of families _SCHEDULES does not name)."""
    if genome.family in _SCHEDULES:
        return "-".join(_SCHEDULES[genome.family](genome.as_dict()))
    if family is None:
        raise ValueError(f"the schedule of a {genome.family!r} genome needs its family")
    return "-".join(_generic(genome, family))


def _candidates(op: Any, problem: Problem) -> dict[str, tuple[str, Genome]]:
    """Schedule -> (origin, genome) of its first genome among the family's seeds, then RANDOM_DRAWS random ones."""
    drawn = [(f"seed {i}", g) for i, g in enumerate(op.family.seeds(problem, TARGET))]
    rng = np.random.default_rng(zlib.crc32(problem.key.encode()))
    for i in range(RANDOM_DRAWS):
        try:
            drawn.append((f"random {i}", op.family.random(rng, problem, TARGET)))
        except InvalidGenome:
            continue
    first: dict[str, tuple[str, Genome]] = {}
    for origin, genome in drawn:
        first.setdefault(schedule(genome, op.family), (origin, genome))
    return first


def _pairs(name: str) -> set[tuple[str, str]]:
    parts = name.split("-")
    return {(a, b) for a in parts for b in parts if a <= b}


def _spread(candidates: dict[str, tuple[str, Genome]], most: int) -> list[str]:
    """Up to `most` schedules: the first seed's, then each next one the one naming the most pairs of structure genes
    not named yet (the earliest on a tie: seeds before random genomes), so a few cover the combinations a renderer
    branches on."""
    left = list(candidates)
    chosen = left[:1]  # the family's first seed: its plain kernel
    covered = _pairs(chosen[0]) if chosen else set()
    left = left[1:]
    while left and len(chosen) < most:
        best = max(left, key=lambda name: (len(_pairs(name) - covered), -left.index(name)))
        chosen.append(best)
        covered |= _pairs(best)
        left.remove(best)
    return chosen


def select(names: Iterable[str]) -> list[Case]:
    """The cases of the operators `names`: per problem, the schedules `_spread` picks among its family's seeds and
    RANDOM_DRAWS seeded random genomes (each by its first genome), and for the operators in EXPORTED the export of
    the first (the first seed's)."""
    import operators

    out: list[Case] = []
    for name in names:
        if name not in PROBLEMS:
            raise ValueError(f"no golden problems for operator {name!r}: add its shapes to PROBLEMS in "
                             "tests/golden/cases.py")
        op = operators.get(name)
        for sizes, dtype, most in PROBLEMS[name]:
            problem = op.problem(sizes, dtype)
            candidates = _candidates(op, problem)
            kept = [Case(name, problem, candidates[s][1], s, candidates[s][0]) for s in _spread(candidates, most)]
            if name in EXPORTED and kept:
                kept.append(Case(name, problem, kept[0].genome, kept[0].schedule, kept[0].origin, export=True))
            out += kept
    return out
