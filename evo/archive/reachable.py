"""How many of an archive's cells the search's genome space can reach (issue 41).

An experiment that restricts genes (smoke.yaml: three BLOCK_M values, two BLOCK_N, two BLOCK_K) leaves most cells
of the descriptors' grid out of reach: 6 elites of 45 cells read as 13% coverage where 8 cells can be reached at
all. Coverage is therefore also given over the reachable cells: those where the family's seeds and a seeded
sample of its valid (repaired) random genomes fall, together with every filled cell. The spaces are far too
large to enumerate (a restricted GEMM still has ~10^8 raw genomes), so a cell only rare genomes reach may be
missed; the count is a lower bound, and coverage over it never exceeds 100%.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evo.archive.grid import GridArchive
from evo.problem import Problem, Target

__all__ = ["reachable_cells", "experiment_reachable", "SAMPLES", "MAX_PROBLEMS"]

SAMPLES = 1024  # random genomes drawn per problem: every cell of the shipped experiments' grids within ~0.2 s
# Counted for runs of at most this many problems (status and report; about 0.1 s each on a 2-core CPU): a run of
# thousands of shapes shows coverage over the whole grid, and its status and report answer in seconds (issue 42)
MAX_PROBLEMS = 32


def reachable_cells(archive: GridArchive, operator: Any, problem: Problem, target: Target, samples: int = SAMPLES,
                    seed: int = 0) -> int | None:
    """The number of `archive`'s cells that genomes of `operator`'s family (with the experiment's restrictions)
    valid for `problem` on `target` fall in; None when a descriptor needs compile-time resources (a genome's cell
    is then unknown until it is compiled)."""
    if any(a.descriptor.needs_resources for a in archive.axes):
        return None
    family = operator.family
    cells = {e.cell for e in archive.elites()}
    rng = np.random.default_rng(seed)
    genomes = list(family.seeds(problem, target))
    for _ in range(samples):
        try:
            genomes.append(family.random(rng, problem, target))
        except ValueError:  # InvalidGenome: no valid genome near this draw
            continue
    for genome in genomes:
        try:
            cells.add(archive.place(genome)[0])
        except (ValueError, KeyError, TypeError):
            continue
    return len(cells)


def experiment_reachable(archive: GridArchive, problem: Problem, experiment: Any, target: Target) -> int | None:
    """reachable_cells for the genes `experiment` (an evo.experiment.spec.Experiment, or None: the registry's
    whole space) restricts; an archive built from a store places rows with the unrestricted family (earlier
    sessions may have restricted genes otherwise), but what the search could reach is the experiment's space."""
    import operators

    genome = dict(experiment.genome) if experiment is not None else None
    try:
        operator = operators.get(problem.operator, genome)
    except ValueError:  # restrictions this operator does not take (an experiment edited since): its whole space
        operator = operators.get(problem.operator)
    return reachable_cells(archive, operator, problem, target)
