"""Crossover: a child that takes each gene, or each group of related genes, from one of two parents."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evo.mutators.base import Mutator
from genomes.base import Genome, GenomeFamily

__all__ = ["UniformCrossover", "GroupCrossover"]


def _check_probability(owner: str, p: float) -> float:
    if not isinstance(p, (int, float)) or not 0.0 < p < 1.0:
        raise ValueError(f"{owner}: swap_probability must be strictly between 0 and 1, got {p!r}")
    return float(p)


class UniformCrossover(Mutator):
    """Each gene comes from the second parent with probability `swap_probability`, else from the first."""

    name = "crossover_uniform"
    num_parents = 2

    def __init__(self, swap_probability: float = 0.5) -> None:
        self.swap_probability = _check_probability(self.name, swap_probability)

    def vary(self, parents: Sequence[Genome], family: GenomeFamily, rng: np.random.Generator) -> Genome:
        a, b = parents
        names = sorted(family.genes)
        take_b = rng.random(len(names)) < self.swap_probability
        return a.replace(**{n: b[n] for n, t in zip(names, take_b, strict=True) if t})


class GroupCrossover(Mutator):
    """Each gene group (`GenomeFamily.groups()`: tile, launch, loop, ...) comes whole from the second parent
    with probability `swap_probability`: genes that only work together (a tile shape and its pipeline depth)
    travel together."""

    name = "crossover_group"
    num_parents = 2

    def __init__(self, swap_probability: float = 0.5) -> None:
        self.swap_probability = _check_probability(self.name, swap_probability)

    def vary(self, parents: Sequence[Genome], family: GenomeFamily, rng: np.random.Generator) -> Genome:
        a, b = parents
        groups = family.groups()
        order = sorted(groups)
        take_b = rng.random(len(order)) < self.swap_probability
        changes = {n: b[n] for g, t in zip(order, take_b, strict=True) if t for n in groups[g]}
        return a.replace(**changes)
