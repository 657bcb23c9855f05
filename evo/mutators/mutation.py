"""Mutation: move one gene, or several at once, to a neighbouring value of its domain."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evo.mutators.base import Mutator
from genomes.base import Genome, GenomeFamily

__all__ = ["PointMutation", "MultiGeneMutation"]


def _mutable(parent: Genome, family: GenomeFamily) -> list[str]:
    """Genes with somewhere to go: a pinned gene (one value) has no neighbour. A parent value outside a
    restricted domain (a transferred genome, say) still counts: it is moved into the domain."""
    out = []
    for name, gene in family.genes.items():
        if len(gene.values) > 1 or parent[name] not in gene.values:
            out.append(name)
    return out


def _step(family: GenomeFamily, name: str, value: object, rng: np.random.Generator) -> object:
    gene = family.genes[name]
    if value not in gene.values:
        return gene.nearest(value)
    options = gene.neighbours(value)
    return options[int(rng.integers(len(options)))] if options else value


class PointMutation(Mutator):
    """One gene, drawn uniformly among those that can change, moves to a random neighbouring value."""

    name = "mutate"
    num_parents = 1

    def vary(self, parents: Sequence[Genome], family: GenomeFamily, rng: np.random.Generator) -> Genome:
        parent = parents[0]
        genes = _mutable(parent, family)
        if not genes:
            return parent
        name = genes[int(rng.integers(len(genes)))]
        return parent.replace(**{name: _step(family, name, parent[name], rng)})


class MultiGeneMutation(Mutator):
    """Between `min_genes` and `max_genes` distinct genes (uniformly many) each move to a neighbouring value:
    a larger jump than a point mutation, for moves that need two genes to change together (a bigger tile
    and fewer stages, say) to stay valid."""

    name = "mutate_multi"
    num_parents = 1

    def __init__(self, min_genes: int = 2, max_genes: int = 4) -> None:
        if not isinstance(min_genes, int) or not isinstance(max_genes, int) or min_genes < 1:
            raise ValueError(f"mutate_multi: min_genes must be an integer >= 1, got {min_genes!r}")
        if max_genes < min_genes:
            raise ValueError(f"mutate_multi: max_genes ({max_genes}) is below min_genes ({min_genes})")
        self.min_genes = min_genes
        self.max_genes = max_genes

    def vary(self, parents: Sequence[Genome], family: GenomeFamily, rng: np.random.Generator) -> Genome:
        parent = parents[0]
        genes = _mutable(parent, family)
        if not genes:
            return parent
        high = min(self.max_genes, len(genes))
        low = min(self.min_genes, high)
        k = int(rng.integers(low, high + 1))
        chosen = [genes[i] for i in sorted(rng.choice(len(genes), size=k, replace=False))]
        return parent.replace(**{n: _step(family, n, parent[n], rng) for n in chosen})
