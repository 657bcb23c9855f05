"""A candidate kernel: one genome rendered for one problem, identified by the hash of its source.

A `Candidate` is plain data (picklable, cheap to ship to compile workers and GPU workers). `Prepared` is a
candidate together with the result of compiling it ahead of time on a CPU worker; the GPU side takes either.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evo.evaluate.modules import source_hash
from evo.problem import Problem, Target
from evo.store.record import Evaluation
from genomes.base import Genome

if TYPE_CHECKING:
    from evo.evaluate.compiler import CompileResult
    from operators.base import Operator

__all__ = ["Candidate", "Prepared", "make_candidate"]


@dataclass(frozen=True)
class Candidate:
    problem: Problem
    genome: Genome
    source: str  # the rendered, standalone Triton module
    source_hash: str  # evo.evaluate.modules.source_hash(source): the identity of the kernel in the store
    origin: str = ""  # seed, random, mutate, crossover, transfer, ...
    parents: tuple[str, ...] = ()  # genome hashes

    def __post_init__(self) -> None:
        if self.source_hash != source_hash(self.source):
            raise ValueError("source_hash does not match the source; build candidates with make_candidate()")

    def evaluation(self, status: str, reason: str = "", **fields: Any) -> Evaluation:
        """An Evaluation row for this candidate; `fields` fill the measured parts."""
        now = time.time()
        fields.setdefault("started_at", now)
        fields.setdefault("finished_at", now)
        return Evaluation(
            operator=self.problem.operator, problem_key=self.problem.key, problem=self.problem.to_json(),
            genome=self.genome.canonical(), genome_hash=self.genome.hash, source_hash=self.source_hash,
            status=status, reason=reason, origin=self.origin, parents=list(self.parents), **fields)


@dataclass(frozen=True)
class Prepared:
    """A candidate and, when it was compiled ahead of time, what compiling it found."""

    candidate: Candidate
    compiled: CompileResult | None = None

    @property
    def ready(self) -> bool:
        """True when the candidate may go to a GPU: compiled fine, or not compiled ahead at all."""
        return self.compiled is None or self.compiled.status == "ok"


def make_candidate(operator: Operator, genome: Genome, problem: Problem, target: Target, *, origin: str = "",
                   parents: tuple[str, ...] | list[str] = ()) -> Candidate:
    """Render `genome` for `problem` on `target`. Raises the family's InvalidGenome (a ValueError) when the
    genome cannot run the problem: check validity before rendering, a rendered kernel is assumed valid."""
    if problem.operator != operator.name:
        raise ValueError(f"problem {problem.key} is for operator {problem.operator!r}, not {operator.name!r}")
    problems = operator.family.violations(genome, problem, target)
    if problems:
        from genomes.base import InvalidGenome

        raise InvalidGenome(f"{genome} cannot run {problem.key} on {target.name}: {'; '.join(problems)}")
    source = operator.render(genome, problem, target)
    return Candidate(problem, genome, source, source_hash(source), origin, tuple(parents))
