"""`evo bench`'s evo contender is the kernel source the search measured, as the run's store kept it."""

from __future__ import annotations

import operators
from evo.bench.entrants import evo_entrant
from evo.evaluate.modules import source_hash
from evo.problem import HOPPER
from evo.store.record import Evaluation


def _row(op, genome, problem, source):
    return Evaluation(operator="gemm", problem_key=problem.key, problem=problem.to_json(), genome=genome.canonical(),
                      genome_hash=genome.hash, source_hash=source_hash(source), status="ok", gpu="TEST DATA")


def test_the_contender_runs_the_stored_source_not_the_genome_rendered_again():
    op = operators.get("gemm")
    problem = op.problem((64, 64, 64), "fp16")
    genome = op.family.seeds(problem, HOPPER)[0]
    stored = op.render(genome, problem, HOPPER) + "\nEVO_MEASURED_TEXT = True\n"  # not what the renderer writes now
    entrant, differs = evo_entrant(op, _row(op, genome, problem, stored), problem, HOPPER, stored=stored)
    assert not differs and entrant.make(problem).__globals__["EVO_MEASURED_TEXT"] is True
    entrant, differs = evo_entrant(op, _row(op, genome, problem, stored), problem, HOPPER)  # an older store's row
    assert differs and "EVO_MEASURED_TEXT" not in entrant.make(problem).__globals__
