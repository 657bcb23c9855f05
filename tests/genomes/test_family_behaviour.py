"""Every genome family keeps its recorded verdicts and repairs (tests/genomes/behaviour.py), and its repair keeps
the properties the search relies on: a repaired genome is valid, what repair made is its own repair (a valid genome
that keeps the soft rules too is left as it is), and an invalid genome is never handed back unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from genomes.base import InvalidGenome
from tests.genomes.behaviour import CASES, genomes, record, recorded


@pytest.mark.parametrize("name", sorted(CASES))
def test_verdicts_and_repairs_are_the_recorded_ones(name):
    live, kept = list(record(CASES[name])), recorded(name)
    assert len(live) == len(kept), f"{name}: {len(live)} genomes drawn, {len(kept)} recorded"
    differ = [(i, k, v) for i, (k, v) in enumerate(zip(kept, live, strict=True)) if k != v]
    assert not differ, (f"{name}: {len(differ)} of {len(kept)} genomes judged or repaired otherwise; the first: "
                        f"row {differ[0][0]}\n recorded {differ[0][1]}\n now      {differ[0][2]}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_repair_properties(name):
    case = CASES[name]
    family = case.make()
    checked = repaired = 0
    for problem in case.problems[::2]:
        for target in case.targets:
            rng = np.random.default_rng([len(problem.key), 7])
            for genome in genomes(case, family, problem, target, rng):
                checked += 1
                reasons = family.violations(genome, problem, target)
                try:
                    fixed = family.repair(genome, problem, target, np.random.default_rng(checked))
                except InvalidGenome as e:  # no valid neighbour, or a gene outside a restricted domain stayed there
                    assert str(e).startswith("cannot repair") or "is not one of" in str(e), str(e)
                    continue
                repaired += 1
                assert family.violations(fixed, problem, target) == [], (problem.key, str(genome), str(fixed))
                # violations empty iff valid: an invalid genome is never handed back as it was
                assert not reasons or fixed != genome, (problem.key, str(genome), reasons)
                # repair is idempotent: what it made is what it leaves (soft rules included)
                assert family.repair(fixed, problem, target, np.random.default_rng(checked)) == fixed
    assert checked >= 300 and repaired >= 50, (checked, repaired)  # the draws reached the rules
