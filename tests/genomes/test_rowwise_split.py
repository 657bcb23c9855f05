"""The split genes of the row-wise families (split, split_mode): chunk widths, validity, repair, draws, seeds,
descriptors."""

from __future__ import annotations

import numpy as np
import pytest

from evo.problem import HOPPER, Problem, Target
from genomes.rmsnorm import RMSNormFamily
from genomes.rowwise_split import CHUNK_ALIGN, chunk_width, sensible_splits
from genomes.softmax import SoftmaxFamily

FEW_ROWS = [(1, 32000), (4, 50257), (8, 131072), (1, 256000), (16, 8192), (3, 1000)]


def _problem(family, sizes, dtype="bf16"):
    return Problem.make(family.name, ("rows", "cols"), sizes, dtype)


@pytest.fixture(params=[SoftmaxFamily, RMSNormFamily], ids=lambda f: f.name)
def family(request):
    return request.param()


def test_chunk_width():
    assert chunk_width(5000, 1) == 5000  # the whole row, unrounded
    assert chunk_width(262144, 16) == 16384 and chunk_width(32000, 8) == 4032  # 4000 up to a multiple of 64
    assert chunk_width(50, 2) == 64  # one chunk holds the row, the other is empty
    for n in (1, 63, 1000, 50257, 131071):
        for s in (2, 4, 8, 16, 32, 64):
            c = chunk_width(n, s)
            assert c % CHUNK_ALIGN == 0 and c * s >= n and c - CHUNK_ALIGN < -(-n // s)


def test_split_rules_are_detected_and_repaired(family):
    p = _problem(family, (4, 50257))
    base = family.base(BLOCK=4096, num_warps=8, split=16)
    assert family.violations(family.make(base), p, HOPPER) == []
    small = Target("8sm", 90, 232448, 8)
    cases = {
        "ROWS must be 1": (dict(ROWS=2), HOPPER),
        "persistent must be 0": (dict(persistent=2), HOPPER),
        "single pass needs BLOCK >= 3200 (one chunk of N=50257 split 16 ways)": (dict(BLOCK=2048), HOPPER),
        "mode must be single": (dict(split_mode="cooperative", mode="looped", BLOCK=1024), HOPPER),
        "needs 16 programs resident at once: more than the 8 SMs": (dict(split_mode="cooperative"), small),
    }
    rng = np.random.default_rng(0)
    for reason, (change, target) in cases.items():
        g = family.make(dict(base, **change))
        found = family.violations(g, p, target)
        assert any(reason in r for r in found), (reason, found)
        fixed = family.repair(g, p, target, rng)
        assert family.violations(fixed, p, target) == []
        assert fixed["split"] > 1, fixed  # repair keeps the row split, it fixes what is around it
    # a cooperative split wider than the SMs narrows to them; one that must loop becomes two launches
    fixed = family.repair(family.make(dict(base, split_mode="cooperative")), p, small, rng)
    assert fixed["split"] == 8 and fixed["split_mode"] == "cooperative" and fixed["mode"] == "single"
    only_looped = type(family)({"mode": ["looped"]})
    g = only_looped.make(dict(base, split_mode="cooperative", mode="looped", BLOCK=1024))
    fixed = only_looped.repair(g, p, HOPPER, rng)
    assert fixed["split_mode"] == "two_launch" and fixed["split"] == 16


def test_split_mode_is_free_when_split_is_one(family):
    p = _problem(family, (8192, 5000))
    for mode in ("two_launch", "cooperative"):
        g = family.make(family.base(BLOCK=2048, split_mode=mode, ROWS=2, persistent=2, mode="looped"))
        assert family.violations(g, p, HOPPER) == []


@pytest.mark.parametrize("sizes", FEW_ROWS)
def test_random_draws_split_few_rows(family, sizes):
    p = _problem(family, sizes)
    rng = np.random.default_rng(1)
    drawn = [family.random(rng, p, HOPPER) for _ in range(120)]
    assert all(family.violations(g, p, HOPPER) == [] for g in drawn)
    splits, sensible = {g["split"] for g in drawn}, sensible_splits(family, p, HOPPER)
    assert 1 in splits and len(splits) >= min(3, len(sensible)) and len(sensible) >= 2, (splits, sensible)
    assert {g["split_mode"] for g in drawn if g["split"] > 1} == {"two_launch", "cooperative"}
    assert all(g["split"] in sensible_splits(family, p, HOPPER) for g in drawn)


def test_many_rows_draw_no_split(family):
    p = _problem(family, (8192, 8192))
    assert sensible_splits(family, p, HOPPER) == [1]
    rng = np.random.default_rng(2)
    assert {family.random(rng, p, HOPPER)["split"] for _ in range(50)} == {1}


@pytest.mark.parametrize("sizes", FEW_ROWS)
def test_seeds_of_few_row_problems_split_both_ways(family, sizes):
    p = _problem(family, sizes)
    seeds = family.seeds(p, HOPPER)
    split = [g for g in seeds if g["split"] > 1]
    assert {g["split_mode"] for g in split} == {"two_launch", "cooperative"}, sizes
    assert all(g["ROWS"] == 1 and g["persistent"] == 0 and family.violations(g, p, HOPPER) == [] for g in split)
    # programs enough to fill at least half the SMs, as far as 64 per row and chunks of 256 columns allow
    most = max(sizes[0] * g["split"] for g in split)
    assert 2 * most > min(HOPPER.num_sms, sizes[0] * 64, sizes[0] * sizes[1] // 256), most


def test_seeds_of_many_row_problems_do_not_split(family):
    for sizes in ((8192, 8192), (4096, 32768)):
        assert all(g["split"] == 1 for g in family.seeds(_problem(family, sizes), HOPPER))


def test_rows_too_wide_for_one_program_get_cooperative_seeds_with_and_without_prefetch(family):
    seeds = family.seeds(_problem(family, (2048, 262144)), HOPPER)
    split = [g for g in seeds if g["split"] > 1]
    assert split and all(g["split_mode"] == "cooperative" for g in split)
    assert {g["num_stages"] for g in split} == {1, 2}
    assert all(family.is_valid(g, _problem(family, (2048, 262144)), HOPPER) for g in seeds)


def test_split_genomes_stay_valid_on_clipped_problems(family):
    rng = np.random.default_rng(3)
    for sizes in FEW_ROWS[:3]:
        p = _problem(family, sizes)
        genomes = [g for g in family.seeds(p, HOPPER) + [family.random(rng, p, HOPPER) for _ in range(60)]
                   if g["split"] > 1]
        assert genomes
        for clip in (64, 256):
            small = _problem(family, (min(sizes[0], clip), min(sizes[1], clip)), "fp16")
            for g in genomes:
                assert family.violations(g, small, HOPPER) == [], (g, small.key)


def test_split_descriptors(family):
    descs = family.descriptors()
    one = family.make(family.base())
    two = family.make(family.base(split=8))
    coop = family.make(family.base(split=64, split_mode="cooperative"))
    assert [descs["split"](g) for g in (one, two, coop)] == [0.0, 3.0, 6.0]
    assert [descs["reduction"](g) for g in (one, two, coop)] == [0.0, 1.0, 2.0]
    assert descs["reduction"](family.make(family.base(split_mode="cooperative"))) == 0.0  # split 1: one program
    assert [descs["reduction"].tick(v) for v in (0.0, 1.0, 2.0)] == ["one program", "two launches", "cooperative"]
    assert descs["split"].tick(6.0) == "64"
