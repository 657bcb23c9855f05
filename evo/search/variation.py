"""Making the genomes a search evaluates: the first population, then children of the archive's elites.

Variation runs in the search's own process, not in a worker: it takes microseconds, reads the archive as it
is at that moment, and keeps every random draw of a run in one seeded stream (numpy Generators from the
experiment's seed), so that a run with the sequential executor repeats exactly.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evo.archive import Elite, GridArchive
from evo.mutators import MutatorMix
from evo.problem import Problem, Target
from evo.search.selection import Selection
from genomes.base import Genome, GenomeFamily, InvalidGenome

__all__ = ["Proposal", "Variation", "coerce", "TRANSFER_LIMIT"]

TRANSFER_LIMIT = 32  # at most this many elites of earlier problems seed the next one (best ratios first)
_PARENTS_KEPT = 4096  # parents kept read back (an archive of a problem holds fewer elites than this)


@dataclass(frozen=True)
class Proposal:
    genome: Genome
    origin: str  # seed, transfer, random, or the mutator's registry name
    parents: tuple[str, ...] = ()  # genome hashes


def coerce(family: GenomeFamily, genome: Genome | str | Mapping[str, Any]) -> Genome:
    """`genome` (a Genome, or its canonical text) in this family's domains: a value outside a gene's
    (possibly restricted) domain moves to the nearest value of the domain."""
    if isinstance(genome, Genome):
        values = genome.as_dict()
    else:
        values = (json.loads(genome) if isinstance(genome, str) else dict(genome))["genes"]
    values = family.complete(values)  # genes added since the genome was stored, at the value it held
    if set(values) != set(family.genes):
        raise InvalidGenome(f"{family.name}: genome with genes {sorted(values)} is not of this family")
    return family.make({k: family.genes[k].nearest(v) for k, v in values.items()})


class Variation:
    """Proposes genomes for one problem, never one already in `seen` if a few draws can avoid it."""

    def __init__(self, family: GenomeFamily, problem: Problem, target: Target, mutators: MutatorMix,
                 selection: Selection, redraws: int = 8) -> None:
        if redraws < 1:
            raise ValueError(f"redraws must be at least 1, got {redraws}")
        self.family = family
        self.problem = problem
        self.target = target
        self.mutators = mutators
        self.selection = selection
        self.redraws = redraws
        # parents read back from their stored text once, not once per child: a guided proposal draws a pool of 32
        # children, and parsing the parents' JSON was a sixth of a child's time (reports/gpu/driver-load-simulated.md)
        self._parents: dict[str, Genome] = {}

    def initial(self, rng: np.random.Generator, n_random: int, transfer: Iterable[Elite] = (),
                seen: set[str] | frozenset[str] = frozenset(), memory: Iterable[Any] = (),
                seeds: bool = True) -> list[Proposal]:
        """Elites remembered from earlier runs (`memory`: rows of the shared results database, origin "memory"),
        the family's seeds and transferred elites (memory and transfer repaired for this problem), taken in turn
        one from each, then `n_random` random valid genomes; without duplicates, and without genomes in `seen`.
        Taken in turn, because a search under a wall-clock budget may evaluate only the first few: forty elites
        of other shapes before the seeds once left a prefill GEMM with decode tiles only. The random draws do not
        depend on `seen`, so a resumed run proposes the same first population and skips what it already
        evaluated."""
        out: list[Proposal] = []
        taken: set[str] = set()

        def take(p: Proposal) -> None:
            if p.genome.hash not in taken:
                taken.add(p.genome.hash)
                out.append(p)

        def repaired(origin: str, elites: Iterable[Any]) -> list[Proposal]:
            props = []
            for elite in elites:
                try:
                    genome = self.family.repair(coerce(self.family, elite.genome), self.problem, self.target, rng)
                except InvalidGenome:
                    continue
                props.append(Proposal(genome, origin, (elite.genome_hash,)))
            return props

        sources = [repaired("memory", memory),
                   [Proposal(g, "seed") for g in (self.family.seeds(self.problem, self.target) if seeds else ())],
                   repaired("transfer", list(transfer)[:TRANSFER_LIMIT])]
        for turn in itertools.zip_longest(*sources):
            for p in turn:
                if p is not None:
                    take(p)
        drawn = 0
        for _ in range(max(0, n_random) * 20):
            if drawn >= n_random:
                break
            try:
                genome = self.family.random(rng, self.problem, self.target)
            except InvalidGenome:
                continue
            if genome.hash not in taken:
                take(Proposal(genome, "random"))
                drawn += 1
        return [p for p in out if p.genome.hash not in seen]

    def child(self, archive: GridArchive, seen: set[str], rng: np.random.Generator,
              selection: Selection | None = None) -> Proposal:
        """A child of the archive's elites (parents chosen by `selection`, the experiment's by default) not in
        `seen`; after `redraws` duplicates, a random genome not in `seen` (`random_child`)."""
        last: Proposal | None = None
        if len(archive):
            selection = selection or self.selection
            for _ in range(self.redraws):
                mutator = self.mutators.choose(rng)
                parents = selection.select(archive, mutator.num_parents, rng)
                try:
                    genome = mutator([self._parent(e.genome) for e in parents], self.family, self.problem,
                                     self.target, rng)
                except InvalidGenome:
                    continue
                last = Proposal(genome, mutator.name, tuple(e.genome_hash for e in parents))
                if genome.hash not in seen:
                    return last
        return self.random_child(seen, rng, last)

    def _parent(self, text: str) -> Genome:
        """coerce(family, text), kept by its text (a Genome is immutable); at most _PARENTS_KEPT of them."""
        genome = self._parents.get(text)
        if genome is None:
            if len(self._parents) >= _PARENTS_KEPT:
                self._parents.clear()
            genome = self._parents[text] = coerce(self.family, text)
        return genome

    def random_child(self, seen: set[str], rng: np.random.Generator, last: Proposal | None = None) -> Proposal:
        """A random valid genome not in `seen`; failing that after `redraws` draws, the last one drawn (or
        `last`): a re-measurement is the price of a saturated space."""
        for _ in range(self.redraws):
            try:
                genome = self.family.random(rng, self.problem, self.target)
            except InvalidGenome:
                continue
            last = Proposal(genome, "random")
            if genome.hash not in seen:
                return last
        if last is None:
            raise RuntimeError(f"{self.family.name}: no valid genome could be drawn for {self.problem.key}")
        return last
