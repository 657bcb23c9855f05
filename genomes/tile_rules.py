"""Soft rules the matrix-product families share (linear, moe, fp8_gemm): a block no wider than its problem dimension
needs, and a split of K no finer than its BLOCK_K steps. Each is a `Rule` of genomes/rule_table.py, built once here
so its check, its message and its fix read alike in every family's table."""

from __future__ import annotations

from genomes.rowwise import next_pow2
from genomes.rule_table import Fix, Rule

__all__ = ["block_fits", "split_has_steps"]


def block_fits(gene: str, dim: str, floor: int) -> Rule:
    """Soft rule `<gene, lower-cased>_fits`: block gene `gene` (BLOCK_N, ...) is at most the problem's `dim` rounded
    up to a power of two, and never held below `floor` (tl.dot's smallest tile); its fix steps the gene down."""

    def check(g, p, t):
        n = p.dims[dim]
        return f"{gene}={g[gene]} is wider than {dim}={n} needs" if g[gene] > max(floor, next_pow2(n)) else None

    return Rule(f"{gene.lower()}_fits", check, lambda fam, g, p, t: fam._step_down(g, gene), hard=False)


def split_has_steps(fix: Fix | None = None) -> Rule:
    """Soft rule `split_has_steps`: SPLIT_K is at most the BLOCK_K steps of K (each slice has work); its fix steps
    SPLIT_K down unless the family gives its own."""

    def check(g, p, t):
        steps = -(-p.dims["K"] // g["BLOCK_K"])
        if g["SPLIT_K"] > steps:
            return f"SPLIT_K={g['SPLIT_K']} exceeds the {steps} BLOCK_K steps of K={p.dims['K']}"
        return None

    return Rule("split_has_steps", check, fix or (lambda fam, g, p, t: fam._step_down(g, "SPLIT_K")), hard=False)
