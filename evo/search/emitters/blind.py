"""The emitters that need no model: the experiment's mutation and crossover mix, exploitation of the best
cells, and random restarts."""

from __future__ import annotations

from typing import Any

import numpy as np

from evo.search.emitters.base import EmitContext, Emitter

__all__ = ["VariationEmitter", "ExploitEmitter", "RestartEmitter", "TopSelection"]


class VariationEmitter(Emitter):
    """The classic MAP-Elites step: the experiment's mutators and crossovers on parents chosen by its selection."""

    name = "variation"

    def propose(self, ctx: EmitContext) -> Any:
        return ctx.variation.child(ctx.archive, ctx.seen, ctx.rng)


class TopSelection:
    """Parents among the `top` fastest elites, the faster the likelier (weights 1, 1/2, 1/3, ...)."""

    def __init__(self, top: int) -> None:
        self.top = top

    def select(self, archive: Any, n: int, rng: np.random.Generator) -> list[Any]:
        elites = sorted(archive.elites(), key=lambda e: (-e.throughput, e.genome_hash))[: self.top]
        if not elites:
            raise ValueError("cannot select parents from an empty archive")
        p = 1.0 / np.arange(1, len(elites) + 1)
        idx = rng.choice(len(elites), size=n, replace=len(elites) < n, p=p / p.sum())
        return [elites[int(i)] for i in idx]


class ExploitEmitter(Emitter):
    """Small steps around the best cells: the experiment's mutators on parents among the `top` fastest elites."""

    name = "exploit"

    def __init__(self, top: int = 3) -> None:
        if not isinstance(top, int) or isinstance(top, bool) or top < 1:
            raise ValueError(f"exploit: top must be an integer >= 1, got {top!r}")
        self.top = top
        self._selection = TopSelection(top)

    def propose(self, ctx: EmitContext) -> Any:
        return ctx.variation.child(ctx.archive, ctx.seen, ctx.rng, selection=self._selection)


class RestartEmitter(Emitter):
    """A random valid genome: a restart anywhere in the space, so that the search is never stuck near its seeds."""

    name = "restart"

    def propose(self, ctx: EmitContext) -> Any:
        return ctx.variation.random_child(ctx.seen, ctx.rng)
