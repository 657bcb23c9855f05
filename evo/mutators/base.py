"""Variation operators: the interface, a registry by name, and a weighted mix of them.

A mutator takes `num_parents` genomes and a numpy Generator, proposes a child, and repairs it back into
the valid region of the problem (`GenomeFamily.repair`). Experiments name mutators by registry name with a
weight; `MutatorMix` draws one per child in proportion to the weights.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from evo.problem import Problem, Target
from genomes.base import Genome, GenomeFamily

__all__ = ["Mutator", "MutatorMix", "get", "names"]

_REGISTRY = {
    "mutate": "evo.mutators.mutation:PointMutation",
    "mutate_multi": "evo.mutators.mutation:MultiGeneMutation",
    "crossover_uniform": "evo.mutators.crossover:UniformCrossover",
    "crossover_group": "evo.mutators.crossover:GroupCrossover",
}


class Mutator(ABC):
    name: ClassVar[str] = ""
    num_parents: ClassVar[int] = 1

    def __call__(self, parents: Sequence[Genome], family: GenomeFamily, problem: Problem, target: Target,
                 rng: np.random.Generator) -> Genome:
        """A valid child of `parents` for `problem` on `target`. Raises InvalidGenome if repair fails."""
        if len(parents) != self.num_parents:
            raise ValueError(f"{self.name} takes {self.num_parents} parent(s), got {len(parents)}")
        for p in parents:
            if p.family != family.name:
                raise ValueError(f"{self.name}: parent of family {p.family!r} given with family {family.name!r}")
        return family.repair(self.vary(parents, family, rng), problem, target, rng)

    @abstractmethod
    def vary(self, parents: Sequence[Genome], family: GenomeFamily, rng: np.random.Generator) -> Genome:
        """The raw child, before repair."""

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({settings})"


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str, **settings: Any) -> Mutator:
    """A mutator by registry name, built with `settings` (validated by its constructor)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown mutator {name!r}; known mutators: {', '.join(names())}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)(**settings)


class MutatorMix:
    """Draws a mutator per child with probability proportional to its weight."""

    def __init__(self, weights: Mapping[str, float], settings: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        if not weights:
            raise ValueError("at least one mutator needs a positive weight")
        bad = {k: w for k, w in weights.items() if not np.isfinite(w) or w < 0}
        if bad:
            raise ValueError(f"mutator weights must be finite and non-negative, got {bad}")
        active = {k: float(w) for k, w in weights.items() if w > 0}
        if not active:
            raise ValueError(f"at least one mutator needs a positive weight, got {dict(weights)}")
        settings = settings or {}
        unknown = set(settings) - set(weights)
        if unknown:
            raise ValueError(f"settings given for mutators without a weight: {sorted(unknown)}")
        self.mutators = [get(name, **settings.get(name, {})) for name in active]
        total = sum(active.values())
        self.probabilities = np.array([w / total for w in active.values()])

    def choose(self, rng: np.random.Generator) -> Mutator:
        return self.mutators[int(rng.choice(len(self.mutators), p=self.probabilities))]

    @property
    def max_parents(self) -> int:
        return max(m.num_parents for m in self.mutators)
