"""A MAP-Elites grid archive: the fastest correct kernel in each cell of a grid over behaviour descriptors.

The grid has one axis per descriptor chosen by the experiment (a genome family's `Descriptor`, with its
default bin edges unless the experiment gives its own). A correct evaluation falls in one cell; it becomes
that cell's elite if the cell is empty or if it beats the elite's throughput by the relative noise margin,
so that timing the same kernel twice never flips the elite back and forth. The archive is a pure function
of the sequence of evaluations offered to it, so replaying a store in row order rebuilds it exactly.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from evo.archive.metrics import ArchiveMetrics, History
from evo.archive.status import AddResult, AddStatus
from evo.experiment.spec import DescriptorSpec
from evo.problem import Problem
from evo.store.record import Evaluation
from genomes.base import Descriptor, Genome, GenomeFamily

__all__ = ["Axis", "Elite", "ELITE_FIELDS", "GridArchive", "ThroughputOf", "throughput_of", "default_descriptors",
           "make_axes"]

# What the archive ranks by: an evaluation -> the operator's throughput at its fitness time (None: no fitness).
# ("objective" names only the clock the fitness is read on: Evaluation.objective, evaluation.objective in YAML.)
ThroughputOf = Callable[[Evaluation], "float | None"]


@dataclass(frozen=True)
class Axis:
    """One dimension of the grid: a descriptor and its bin edges (cell i holds edges[i] <= v < edges[i+1];
    values below the first edge fall in cell 0, above the last in the last cell)."""

    name: str
    descriptor: Descriptor
    edges: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.edges:
            raise ValueError(f"descriptor {self.name!r} has no bin edges")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError(f"descriptor {self.name!r}: bin edges must increase strictly, got {self.edges}")

    @property
    def cells(self) -> int:
        return len(self.edges)

    def index(self, value: float) -> int:
        i = bisect.bisect_right(self.edges, value) - 1  # (NaN compares false: the last cell, as searchsorted puts it)
        return min(max(i, 0), len(self.edges) - 1)


@dataclass(frozen=True)
class Elite:
    """The archive's record of one cell (an elite in the MAP-Elites sense; a problem's best of them all is
    evo.archive.elite.BestKernel). These fields are the archive's schema, declared here only."""

    cell: tuple[int, ...]
    throughput: float  # higher is better: the operator's throughput at fitness_ms
    descriptors: tuple[float, ...]  # the raw descriptor values, in axis order
    genome: str  # Genome.canonical()
    genome_hash: str
    source_hash: str
    evaluation_id: int | None  # row id in the store
    index: int  # 1-based position of its evaluation among all evaluations offered to the archive
    median_ms: float | None  # GPU time of one launch
    ratio: float | None  # speed relative to the primary baseline on the fitness's clock (> 1 is faster)
    origin: str
    fitness_ms: float | None = None  # the time the throughput comes from: on the evaluation's objective's clock
    call_ms: float | None = None  # per-call time of back-to-back eager calls
    host_us: float | None = None  # host time of one call


ELITE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Elite))


def throughput_of(operator: Any, problem: Problem) -> ThroughputOf:
    """What the archive ranks by: the operator's throughput at a correct evaluation's fitness time (the clock its
    objective names: per-call or GPU time), else None."""

    def throughput(ev: Evaluation) -> float | None:
        ms = ev.fitness_ms
        if ev.status != "ok" or not ms or ms <= 0:
            return None
        return float(operator.throughput(problem, ms))

    return throughput


def default_descriptors(family: GenomeFamily) -> tuple[DescriptorSpec, ...]:
    """Used when an experiment names none: the family's first two descriptors computed from the genome
    alone (families list their most telling descriptors first), so the default needs no compile step."""
    names = [name for name, d in family.descriptors().items() if not d.needs_resources][:2]
    if not names:
        raise ValueError(f"genome family {family.name!r} offers no descriptor; an archive needs at least one")
    return tuple(DescriptorSpec(n) for n in names)


def make_axes(family: GenomeFamily, specs: Sequence[DescriptorSpec]) -> tuple[Axis, ...]:
    return _axes(family, tuple(specs))


@functools.lru_cache(maxsize=256)  # one set of axes serves every problem of a run (Axis is frozen)
def _axes(family: GenomeFamily, specs: tuple[DescriptorSpec, ...]) -> tuple[Axis, ...]:
    available = family.descriptors()
    axes = []
    for spec in specs or default_descriptors(family):
        if spec.name not in available:
            raise ValueError(f"unknown descriptor {spec.name!r} for genome family {family.name!r}; "
                             f"available: {', '.join(available)}")
        d = available[spec.name]
        axes.append(Axis(spec.name, d, tuple(float(e) for e in (spec.edges or d.edges))))
    if len({a.name for a in axes}) != len(axes):
        raise ValueError(f"descriptor named twice in {[a.name for a in axes]}")
    return tuple(axes)


@functools.lru_cache(maxsize=4096)  # a genome recurs across the problems of a run: decoded once (Genome is frozen)
def _genome_of(canonical: str, complete: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None) -> Genome:
    # Descriptors read gene values only; skipping the family's domain check lets an archive place genomes
    # stored under other gene overrides (a resumed run whose experiment restricted a gene differently).
    # `complete` (the family's) gives genomes stored before a gene was added that gene at its implied value.
    d = json.loads(canonical)
    genes = complete(d["genes"]) if complete is not None else d["genes"]
    return Genome(d["family"], tuple(sorted(genes.items())))


@functools.lru_cache(maxsize=8192)
def _placed(axes: tuple[Axis, ...], canonical: str, complete: Callable[[Mapping[str, Any]], dict[str, Any]] | None
            ) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """GridArchive.place of a stored genome on axes whose descriptors read genes only."""
    genome = _genome_of(canonical, complete)
    values = tuple(a.descriptor(genome, None) for a in axes)
    return tuple(a.index(v) for a, v in zip(axes, values, strict=True)), values


class GridArchive:
    """Fastest correct kernel per cell of a grid over `axes`, for one problem."""

    def __init__(self, axes: Sequence[Axis], throughput: ThroughputOf, noise_margin: float = 0.01,
                 complete: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None) -> None:
        """`complete` (GenomeFamily.complete) fills in the genes a stored genome predates before it is placed."""
        if not axes:
            raise ValueError("an archive needs at least one descriptor axis")
        if not 0.0 <= noise_margin < 1.0:
            raise ValueError(f"noise_margin must be in [0, 1), got {noise_margin}")
        self.axes = tuple(axes)
        self.throughput_of = throughput
        self.noise_margin = float(noise_margin)
        self.shape = tuple(a.cells for a in self.axes)
        self.cells = math.prod(self.shape)
        self._elites: dict[tuple[int, ...], Elite] = {}
        self._best: Elite | None = None
        self._qd_score = 0.0
        self.evaluations = 0
        self.status_counts: dict[str, int] = {}
        self.best_index = 0  # evaluation count at which the best last rose beyond the noise margin
        self.history = History()
        self._complete = complete

    @classmethod
    def for_problem(cls, operator: Any, problem: Problem, descriptors: Sequence[DescriptorSpec] = (),
                    noise_margin: float = 0.01) -> GridArchive:
        return cls(make_axes(operator.family, descriptors), throughput_of(operator, problem), noise_margin,
                   complete=operator.family.complete)

    @classmethod
    def from_store(cls, store: Any, problem: Problem, operator: Any, descriptors: Sequence[DescriptorSpec] = (),
                   noise_margin: float = 0.01, run_ids: Iterable[str] | None = None) -> GridArchive:
        """The archive built by offering the store's evaluations of `problem` in row order: identical to the
        one built live, since the live search offers each evaluation right after storing it.
        `run_ids` limits the replay to rows of those runs (None: every row of the problem)."""
        archive = cls.for_problem(operator, problem, descriptors, noise_margin)
        keep = None if run_ids is None else set(run_ids)
        archive.add(ev for ev in store.iter(problem.key) if keep is None or ev.run_id in keep)
        return archive

    # -- inserting ------------------------------------------------------------------------------------
    def place(self, genome: Genome, resources: Mapping[str, Any] | None = None) -> tuple[tuple[int, ...],
                                                                                        tuple[float, ...]]:
        """The cell of `genome` and its raw descriptor values. Raises ValueError when a descriptor needs
        compile-time resources that are missing."""
        values = tuple(a.descriptor(genome, resources) for a in self.axes)
        return tuple(a.index(v) for a, v in zip(self.axes, values, strict=True)), values

    def add(self, batch: Iterable[Evaluation]) -> list[AddResult]:
        """Offer evaluations in order; one AddResult per item. Every item counts as one evaluation."""
        return [self._add_one(ev) for ev in batch]

    def _add_one(self, ev: Evaluation) -> AddResult:
        self.evaluations += 1
        self.status_counts[ev.status] = self.status_counts.get(ev.status, 0) + 1
        result = self._insert(ev)
        self.history.append(self.evaluations, self.best_throughput, self._qd_score, self.coverage)
        return result

    def _insert(self, ev: Evaluation) -> AddResult:
        value = self.throughput_of(ev)
        if value is None:
            return AddResult(AddStatus.NOT_ADDED, reason=f"status {ev.status}")
        try:
            if any(a.descriptor.needs_resources for a in self.axes):
                cell, desc = self.place(_genome_of(ev.genome, self._complete), ev.resources)
            else:  # the cell is a function of the genome alone: placed once however many problems hold it
                cell, desc = _placed(self.axes, ev.genome, self._complete)
        except (ValueError, KeyError, TypeError) as e:
            return AddResult(AddStatus.NOT_ADDED, throughput=value, reason=f"cannot place: {e}")
        current = self._elites.get(cell)
        if current is not None and value <= current.throughput * (1.0 + self.noise_margin):
            return AddResult(AddStatus.NOT_ADDED, cell, value, reason="not faster than the elite by the margin")
        elite = Elite(cell=cell, throughput=value, descriptors=desc, genome=ev.genome, genome_hash=ev.genome_hash,
                      source_hash=ev.source_hash, evaluation_id=ev.id, index=self.evaluations,
                      median_ms=ev.median_ms, ratio=ev.ratio, origin=ev.origin, fitness_ms=ev.fitness_ms,
                      call_ms=ev.call_ms, host_us=ev.host_us)
        self._elites[cell] = elite
        self._qd_score += value - (current.throughput if current is not None else 0.0)
        if self._best is None or value > self._best.throughput:
            if self._best is None or value > self._best.throughput * (1.0 + self.noise_margin):
                self.best_index = self.evaluations
            self._best = elite
        return AddResult(AddStatus.NEW if current is None else AddStatus.IMPROVED, cell, value)

    # -- reading --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._elites)

    def __contains__(self, cell: object) -> bool:
        return cell in self._elites

    def get(self, cell: tuple[int, ...]) -> Elite | None:
        return self._elites.get(tuple(cell))

    def elites(self) -> list[Elite]:
        """Every elite, ordered by cell (a stable order, independent of insertion order)."""
        return [self._elites[c] for c in sorted(self._elites)]

    @property
    def best(self) -> Elite | None:
        return self._best

    @property
    def best_throughput(self) -> float | None:
        return self._best.throughput if self._best is not None else None

    @property
    def qd_score(self) -> float:
        return self._qd_score

    @property
    def coverage(self) -> float:
        return len(self._elites) / self.cells

    def metrics(self) -> ArchiveMetrics:
        return ArchiveMetrics(evaluations=self.evaluations, cells=self.cells, filled=len(self._elites),
                              coverage=self.coverage, qd_score=self._qd_score,
                              norm_qd_score=self._qd_score / self.cells, best=self.best_throughput,
                              best_elite=self._best)

    def data(self) -> list[dict[str, Any]]:
        """The elites as plain dicts (one per cell, keys ELITE_FIELDS), e.g. for a pandas DataFrame."""
        return [{f: getattr(e, f) for f in ELITE_FIELDS} for e in self.elites()]
