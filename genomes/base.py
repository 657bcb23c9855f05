"""A genome family: the genes of one kernel family, its validity rules, repair, seeds and descriptors.

A `Genome` is an immutable assignment of a value to every gene of a family. Its canonical encoding is a
JSON object with sorted keys, and its hash is a prefix of that encoding's SHA-256, so the same kernel
configuration has the same identity in every process and every run. Genes added to a family after genomes were
stored name the value those genomes held (`Gene.implied`): at that value they stay out of the encoding, so the
older genomes keep their hashes and read back unchanged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes.genes import Gene

__all__ = ["Genome", "GenomeFamily", "Descriptor", "InvalidGenome"]


class InvalidGenome(ValueError):
    """A genome that names unknown genes, misses genes, or holds values outside their domains."""


@dataclass(frozen=True)
class Genome:
    family: str
    values: tuple[tuple[str, Any], ...]  # sorted by gene name
    # (gene, value) pairs left out of the canonical encoding: genes added later, at the value older genomes held
    implicit: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    def __getitem__(self, name: str) -> Any:
        return dict(self.values)[name]

    def get(self, name: str, default: Any = None) -> Any:
        return dict(self.values).get(name, default)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    def replace(self, **changes: Any) -> Genome:
        d = self.as_dict()
        unknown = set(changes) - set(d)
        if unknown:
            raise InvalidGenome(f"{self.family}: unknown genes {sorted(unknown)}")
        d.update(changes)
        return Genome(self.family, tuple(sorted(d.items())), self.implicit)

    def canonical(self) -> str:
        genes = {k: v for k, v in self.values if (k, v) not in self.implicit}
        return json.dumps({"family": self.family, "genes": genes}, sort_keys=True, separators=(",", ":"))

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values)


@dataclass(frozen=True)
class Descriptor:
    """A behaviour descriptor: a number computed from a genome and, optionally, its compile-time resources.

    `edges` are the default bin edges: a value v falls in cell i when edges[i] <= v < edges[i+1] (values
    below the first edge go to cell 0, above the last to the last cell). For a descriptor that is a gene,
    the edges are the gene's own values, one cell per value.
    """

    name: str
    fn: Callable[[Genome, Mapping[str, Any] | None], float]
    edges: tuple[float, ...]
    doc: str = ""
    needs_resources: bool = False
    label: Callable[[float], str] | None = None  # a bin edge as people read it (genomes.labels); None: the number

    def tick(self, value: float) -> str:
        """How a report labels a bin starting at `value`."""
        return self.label(value) if self.label is not None else f"{value:g}"

    def __call__(self, genome: Genome, resources: Mapping[str, Any] | None = None) -> float:
        if self.needs_resources and not resources:
            raise ValueError(f"descriptor {self.name!r} needs compile-time resources")
        return float(self.fn(genome, resources))


class GenomeFamily:
    """Base class of a kernel family. Subclasses set `name` and implement `_genes`, `violations`, `repair`.

    `overrides` restricts gene domains ({gene: [allowed values]}), e.g. from an experiment's YAML.
    """

    name: str = ""

    def __init__(self, overrides: Mapping[str, list[Any]] | None = None) -> None:
        genes = {g.name: g for g in self._genes()}
        for gene_name, allowed in (overrides or {}).items():
            if gene_name not in genes:
                raise InvalidGenome(f"{self.name}: unknown gene {gene_name!r}; genes are {sorted(genes)}")
            genes[gene_name] = genes[gene_name].restrict(list(allowed))
        self.genes: dict[str, Gene] = genes

    # -- to implement -------------------------------------------------------------------------------
    def _genes(self) -> list[Gene]:
        raise NotImplementedError

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        """Reasons `genome` cannot run `problem` on `target`; empty when it is valid."""
        raise NotImplementedError

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        """The nearest valid genome, changing as few genes as possible. Raises InvalidGenome if none."""
        raise NotImplementedError

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """Known-good starting points for a search (valid for `problem`)."""
        return []

    # -- repair helpers: moves within a gene's (possibly restricted) domain, on a mutable {gene: value} -------
    def _step_down(self, g: dict[str, Any], name: str) -> bool:
        """Move gene `name` to the next smaller value of its domain; False when already at the bottom."""
        smaller = [v for v in self.genes[name].values if v < g[name]]
        if not smaller:
            return False
        g[name] = max(smaller)
        return True

    def _step_up(self, g: dict[str, Any], name: str) -> bool:
        larger = [v for v in self.genes[name].values if v > g[name]]
        if not larger:
            return False
        g[name] = min(larger)
        return True

    def _set(self, g: dict[str, Any], name: str, value: Any) -> bool:
        if value in self.genes[name].values:
            g[name] = value
            return True
        return False

    def _repaired(self, values: dict[str, Any], genome: Genome, problem: Problem, target: Target) -> Genome:
        """The end of a `repair`: the genome of the moved `values`, or InvalidGenome naming what is still wrong
        with it (the repair of `genome` found no valid neighbour)."""
        repaired = self.make(values)
        reasons = self.violations(repaired, problem, target)
        if reasons:
            raise InvalidGenome(f"cannot repair {genome} for {problem.key}: {'; '.join(reasons)}")
        return repaired

    def _repaired_seeds(self, raw: list[dict[str, Any]], problem: Problem, target: Target) -> list[Genome]:
        """Distinct valid genomes from raw seed values: each value moved into its (possibly restricted)
        domain, then repaired for `problem`; seeds that cannot be repaired are dropped."""
        out: dict[str, Genome] = {}
        rng = np.random.default_rng(0)  # repair consults the rng only on ties: seeds stay deterministic
        for values in raw:
            values = {k: self.genes[k].nearest(v) for k, v in values.items()}
            try:
                genome = self.repair(self.make(values), problem, target, rng)
            except InvalidGenome:
                continue
            out.setdefault(genome.hash, genome)
        return list(out.values())

    def descriptors(self) -> dict[str, Descriptor]:
        return {}

    def problem_features(self, values: Mapping[str, Any], problem: Problem) -> list[float]:
        """Numbers the search's surrogate (evo.search.surrogate) learns from beside the genes and the problem's
        sizes: what the genome makes of the problem, which trees cannot compute from the two (a GEMM's grid of
        tiles x splits against the SMs). The same length for every genome of the family; none by default."""
        return []

    # -- shared machinery ---------------------------------------------------------------------------
    def make(self, values: Mapping[str, Any]) -> Genome:
        """A genome from a full {gene: value} mapping, each value checked against its domain."""
        missing = set(self.genes) - set(values)
        unknown = set(values) - set(self.genes)
        if missing or unknown:
            raise InvalidGenome(f"{self.name}: missing genes {sorted(missing)}, unknown genes {sorted(unknown)}")
        for k, v in values.items():
            try:
                self.genes[k].check(v)
            except ValueError as e:
                raise InvalidGenome(str(e)) from None
        return Genome(self.name, tuple(sorted(values.items())), self._implicit())

    def unchecked(self, values: Mapping[str, Any]) -> Genome:
        """The genome of stored gene values completed (`complete`) without checking their domains: a run may have
        restricted a gene differently. Its hash is the one it was stored under."""
        return Genome(self.name, tuple(sorted(self.complete(values).items())), self._implicit())

    def _implicit(self) -> tuple[tuple[str, Any], ...]:
        """The (gene, implied value) pairs a genome of this family leaves out of its canonical encoding."""
        return tuple((name, gene.implied[0]) for name, gene in sorted(self.genes.items()) if gene.implied)

    def complete(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """`values` with every gene it does not name that has an implied value (one added to the family after
        genomes were stored) at that value: a stored genome's genes as the family has them now."""
        return {**dict(self._implicit()), **values}

    def from_canonical(self, text: str | Mapping[str, Any]) -> Genome:
        d = json.loads(text) if isinstance(text, str) else dict(text)
        if d.get("family") != self.name:
            raise InvalidGenome(f"genome of family {d.get('family')!r} given to family {self.name!r}")
        return self.make(self.complete(d["genes"]))

    def is_valid(self, genome: Genome, problem: Problem, target: Target) -> bool:
        return not self.violations(genome, problem, target)

    def require(self, genome: Genome, problem: Problem, target: Target, operator: str) -> None:
        """InvalidGenome unless `genome` is of this family and runs `problem` on `target` (what an operator checks
        before rendering it)."""
        if genome.family != self.name:
            raise InvalidGenome(f"genome of family {genome.family!r} given to the {operator} operator")
        reasons = self.violations(genome, problem, target)
        if reasons:
            raise InvalidGenome(f"genome {genome.hash} cannot run {problem.key}: {'; '.join(reasons)}")

    def random(self, rng: np.random.Generator, problem: Problem, target: Target) -> Genome:
        """A uniformly drawn genome, repaired into the valid region."""
        raw = self.make({name: gene.random(rng) for name, gene in self.genes.items()})
        return self.repair(raw, problem, target, rng)

    def space_size(self) -> int:
        """Number of raw gene combinations (before validity)."""
        n = 1
        for g in self.genes.values():
            n *= len(g.values)
        return n

    def enumerate(self, problem: Problem, target: Target) -> list[Genome]:
        """Every valid genome. Only for small (restricted) spaces: raises when the raw space is huge."""
        import itertools

        if self.space_size() > 2_000_000:
            raise ValueError(f"{self.name}: space of {self.space_size()} raw genomes is too large to enumerate")
        names = list(self.genes)
        implicit = self._implicit()
        out = []
        for combo in itertools.product(*(self.genes[n].values for n in names)):
            g = Genome(self.name, tuple(sorted(zip(names, combo, strict=True))), implicit)
            if not self.violations(g, problem, target):
                out.append(g)
        return out

    def groups(self) -> dict[str, list[str]]:
        """Gene names by group (for crossover by gene group)."""
        out: dict[str, list[str]] = {}
        for g in self.genes.values():
            out.setdefault(g.group, []).append(g.name)
        return out
