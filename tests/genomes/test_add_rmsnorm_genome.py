"""The add+RMSNorm genome: one rule table for violations and repair, decode seeds, descriptors."""

from __future__ import annotations

import pytest

from evo.problem import HOPPER, Problem
from genomes.add_rmsnorm import RULES, AddRMSNormFamily, live_values
from genomes.rowwise import live_limit
from tests.genomes._rule_table_checks import check_rule_table

SIZES = [(1, 4096), (3, 300), (16, 5120), (2048, 4096), (1, 100000), (7, 1)]


def _problem(sizes, dtype="bf16"):
    return Problem.make("rmsnorm+residual", ("rows", "cols"), sizes, dtype)


@pytest.mark.parametrize("sizes", SIZES)
def test_rule_table_drives_violations_and_repair(sizes):
    fam = AddRMSNormFamily()
    broken = check_rule_table(fam, RULES, _problem(sizes), HOPPER, draws=120)
    assert broken["registers"] + broken["single_covers_row"] > 0  # the draws did break rules


def test_decode_seeds_hold_whole_rows():
    fam = AddRMSNormFamily()
    for n in (2048, 4096, 5120, 8192):
        seeds = fam.seeds(_problem((1, n)), HOPPER)
        singles = [g for g in seeds if g["mode"] == "single"]
        assert singles and all(g["BLOCK"] >= n and g["ROWS"] == 1 for g in singles)
        assert all(live_values(g.as_dict()) <= live_limit(g["num_warps"]) for g in seeds)


def test_repair_moves_a_broken_genome_inside_the_rules():
    fam = AddRMSNormFamily()
    p = _problem((1, 8192))
    g = fam.make(fam.base(BLOCK=1024, ROWS=16, num_warps=1, num_stages=3))  # block misses the row, 16 rows of 1
    reasons = fam.violations(g, p, HOPPER)
    assert any("BLOCK >= N=8192" in r for r in reasons) and not any("ROWS=16" in r for r in reasons)  # ROWS: soft
    fixed = fam.repair(g, p, HOPPER, None)
    assert fam.violations(fixed, p, HOPPER) == [] and fixed["ROWS"] == 1 and fixed["num_stages"] == 1


def test_wasteful_genomes_stay_valid_for_smaller_problems():
    fam = AddRMSNormFamily()
    big = fam.make(fam.base(BLOCK=8192, ROWS=2, num_warps=16))  # a 2x8192 elite
    small = _problem((1, 256))  # e.g. the smoke mode's clipped problem
    assert fam.violations(big, small, HOPPER) == []
    assert fam.repair(big, small, HOPPER, None)["BLOCK"] == 256  # repair still aims at the sensible form


def test_restricted_domain_that_cannot_hold_the_row_is_refused_in_one_line():
    fam = AddRMSNormFamily({"BLOCK": [64], "mode": ["single"]})
    p = _problem((1, 4096))
    with pytest.raises(ValueError, match="cannot repair .* single pass needs BLOCK >= N=4096"):
        fam.repair(fam.make(fam.base(BLOCK=64)), p, HOPPER, None)


def test_descriptors_bin_every_seed():
    fam = AddRMSNormFamily()
    for g in fam.seeds(_problem((16, 4096)), HOPPER):
        for d in fam.descriptors().values():
            assert d.edges[0] <= d(g) <= d.edges[-1], (d.name, str(g))
