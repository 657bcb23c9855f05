"""The one record an evaluation carries through its stages: a genome for a problem, with its operator.

The search makes a `Candidate` (genome, problem, operator, origin, parents, ticket); the stages fill it in:
render sets `source` and `source_hash`, compile sets `compiled`, the worker sets `seed` before its check.
It is plain picklable data (the operator object travels with it instead of being rebuilt by name in every
process). Every evaluation row, whichever stage ends the candidate, is built by `Candidate.row`.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from evo.problem import Problem, Target
from evo.store.record import Evaluation

__all__ = ["Candidate", "CompileResult"]


@dataclass
class CompileResult:
    """What compiling a candidate ahead of time, on a CPU, for its target found."""

    status: str  # ok | compile_error | out_of_resources | timeout | crashed | error
    reason: str = ""
    resources: dict[str, Any] = field(default_factory=dict)  # shared, registers, spills (max over kernels), kernels
    compile_s: float = 0.0
    target: Target | None = None
    triton_version: str = ""
    cache_hashes: list[str] = field(default_factory=list)  # Triton cache entries written (one per kernel)
    worker: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Candidate:
    problem: Problem
    genome: Any  # a genomes.base.Genome of the operator's family
    operator: Any  # the operators.base.Operator (this module knows neither: it is the record, below both)
    origin: str = ""  # seed, random, mutate, crossover, transfer, ...
    parents: tuple[str, ...] = ()  # genome hashes
    ticket: int = 0  # unique within a run session: results come back out of order, keyed by it
    emitter: str = ""  # the search's emitter that proposed it (recorded in the row)
    source: str = ""  # render: the standalone Triton module
    source_hash: str = ""  # evo.evaluate.modules.source_hash(source): the kernel's identity in the store
    compiled: CompileResult | None = None  # compile (None: not compiled ahead; the worker compiles on launch)
    seed: int | None = None  # the check's inputs are drawn from it, fresh for every evaluation

    @property
    def ready(self) -> bool:
        """Rendered, and compiled fine or not compiled ahead at all: fit for a worker."""
        return bool(self.source) and (self.compiled is None or self.compiled.ok)

    def row(self, status: str, reason: str = "", **fields: Any) -> Evaluation:
        """The evaluation row of this candidate; `fields` fill the measured parts. What compiling found
        (resources, compile time) is in it unless `fields` says otherwise."""
        now = time.time()
        fields.setdefault("started_at", now)
        fields.setdefault("finished_at", now)
        if self.compiled is not None:
            fields.setdefault("compile_s", self.compiled.compile_s)
            fields.setdefault("resources", dict(self.compiled.resources))
        return Evaluation(
            operator=self.problem.operator, problem_key=self.problem.key, problem=self.problem.to_json(),
            genome=self.genome.canonical(), genome_hash=self.genome.hash, source_hash=self.source_hash,
            status=status, reason=reason, origin=self.origin, parents=list(self.parents), emitter=self.emitter,
            **fields)

    def served(self, cached: Evaluation, objective: str | None = None) -> Evaluation:
        """A new row for this candidate whose source was measured before: the measurement is reused, the
        genome, origin and parents are this candidate's; `worker` says where it came from: "store#<id>" (the
        run's store), or "shared#<id>" as the shared results database (evo.store.shared) marks its rows.
        `objective`: the serving experiment's, which judges the row (Evaluation.judged_by); None keeps the
        cached row's."""
        now = time.time()
        where = cached.worker if cached.worker.startswith("shared#") else f"store#{cached.id}"
        row = dataclasses.replace(cached, genome=self.genome.canonical(), genome_hash=self.genome.hash,
                                  origin=self.origin, parents=list(self.parents), emitter=self.emitter, run_id="",
                                  id=None, worker=where, started_at=now, finished_at=now)
        return row.judged_by(objective) if objective else row

