"""The rope_cache genome: seeds and random draws valid for decode and prefill problems, one rule table read by both
validity and repair, seeds of the problem's kind first, descriptors."""

from __future__ import annotations

import numpy as np
import pytest

from evo.problem import HOPPER, Problem
from genomes.rope_cache import MAX_PER_THREAD, RULES, Facts, RopeCacheFamily, tile

DIMS = ("tokens", "heads", "kv_heads", "head_dim", "context")
DECODE = Problem.make("rope_cache", DIMS, (1, 32, 8, 128, 4096), "bf16")
DECODE16 = Problem.make("rope_cache", DIMS, (16, 28, 4, 64, 4000), "bf16")
PREFILL = Problem.make("rope_cache", DIMS, (2048, 32, 8, 128, 1), "bf16")
ODD = Problem.make("rope_cache", DIMS, (3, 12, 4, 80, 77), "fp16")  # head dim 80: half 40, padded to 64
WIDE = Problem.make("rope_cache", DIMS, (5, 8, 1, 512, 9), "fp32")  # half 256: two BLOCK_D steps at most
PROBLEMS = [DECODE, DECODE16, PREFILL, ODD, WIDE]


@pytest.fixture(scope="module")
def family():
    return RopeCacheFamily()


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.shape_text)
def test_seeds_and_random_draws_are_valid_and_distinct(family, problem):
    seeds = family.seeds(problem, HOPPER)
    assert len(seeds) >= 4 and len({s.hash for s in seeds}) == len(seeds)
    rng = np.random.default_rng(5)
    draws = [family.random(rng, problem, HOPPER) for _ in range(300)]
    for g in seeds + draws:
        assert family.violations(g, problem, HOPPER) == [], g
    # the draws reach every structure and more than a handful of tiles
    assert {g["roles"] for g in draws} == {"mixed", "split"}
    assert len({(g["BLOCK_T"], g["BLOCK_H"], g["BLOCK_D"]) for g in draws}) >= 10


def test_seeds_of_the_problems_kind_come_first(family):
    """A search cut short evaluates the first seeds: one token per program first at decode, blocks of tokens or of
    eight heads first in prefill."""
    decode, prefill = family.seeds(DECODE, HOPPER), family.seeds(PREFILL, HOPPER)
    assert decode[0]["BLOCK_T"] == 1 and decode[0]["BLOCK_H"] == 1 and decode[0]["num_warps"] == 1
    assert prefill[0]["BLOCK_H"] == 8 and prefill[0]["num_warps"] == 4
    assert all(s["BLOCK_D"] == 64 for s in decode)  # the whole half head of 128 in one step


def test_every_rule_reports_and_repair_fixes_it(family):
    """Each rule of the table names what is wrong, and the repair (the rules' fixes) ends valid."""
    f = Facts.of(DECODE)
    broken = {
        "block_d": family.base(BLOCK_D=128, BLOCK_H=1, num_warps=1),  # half of 128 is 64
        "block_t": family.base(BLOCK_T=4),  # one token
        "block_h": family.base(BLOCK_H=64, roles="split", num_warps=8),  # split: 32 heads at most
        "registers": family.base(BLOCK_T=1, BLOCK_H=64, BLOCK_D=64, num_warps=1),
        "threads": family.base(BLOCK_H=1, BLOCK_D=8, num_warps=8),
    }
    assert set(broken) == {rule.name for rule in RULES}
    rng = np.random.default_rng(0)
    for name, values in broken.items():
        g = family.make(values)
        rule = next(r for r in RULES if r.name == name)
        reason = rule.check(g.as_dict(), DECODE, HOPPER)
        assert reason is not None and reason in family.violations(g, DECODE, HOPPER), name
        fixed = family.repair(g, DECODE, HOPPER, rng)
        assert family.violations(fixed, DECODE, HOPPER) == [], (name, fixed)
    # register pressure is relieved with more warps before the tile shrinks
    fixed = family.repair(family.make(broken["registers"]), DECODE, HOPPER, rng)
    assert (fixed["BLOCK_H"], fixed["BLOCK_D"], fixed["num_warps"]) == (64, 64, 8)
    assert tile(fixed.as_dict(), f) <= MAX_PER_THREAD * 32 * 8


def test_a_restricted_domain_that_cannot_be_valid_is_refused(family):
    narrow = RopeCacheFamily({"num_warps": [8], "BLOCK_T": [1], "BLOCK_H": [1], "BLOCK_D": [8]})
    g = narrow.make(narrow.base(BLOCK_H=1, BLOCK_D=8, num_warps=8))
    with pytest.raises(ValueError, match="fewer elements than the 256 threads"):
        narrow.repair(g, DECODE, HOPPER, np.random.default_rng(0))


def test_descriptors_bin_the_structure(family):
    d = family.descriptors()
    g = family.make(family.base(BLOCK_T=2, BLOCK_H=8, BLOCK_D=64, roles="split", num_warps=4))
    assert d["tile"](g) == 10.0 and d["tokens"](g) == 1.0 and d["heads"](g) == 3.0
    assert d["roles"](g) == 1.0 and d["roles"].tick(1.0) == "split" and d["num_warps"](g) == 2.0
