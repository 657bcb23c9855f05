"""The row-wise genome families (softmax, RMSNorm): validity, repair, random draws, seeds, descriptors."""

from __future__ import annotations

import numpy as np
import pytest

from evo.problem import HOPPER, Problem, Target
from genomes.base import InvalidGenome
from genomes.rmsnorm import RMSNormFamily
from genomes.rowwise import MAX_LIVE_PER_THREAD, live_limit, next_pow2, tile_per_thread
from genomes.softmax import SoftmaxFamily

FAMILIES = [SoftmaxFamily, RMSNormFamily]
SIZES = [(8192, 8192), (32768, 4096), (4096, 32768), (8192, 5000), (7, 50), (1, 1), (3, 10), (70, 100000),
         (100, 2049)]


def _problem(family, sizes, dtype="bf16"):
    return Problem.make(family.name, ("rows", "cols"), sizes, dtype)


@pytest.fixture(params=FAMILIES, ids=lambda f: f.name)
def family(request):
    return request.param()


def test_live_limit_follows_the_register_budget():
    # 32 warps leave 64 registers per thread (65536 per SM), half of which may hold live values
    assert [live_limit(w) for w in (1, 2, 4, 8, 16, 32)] == [MAX_LIVE_PER_THREAD] * 5 + [32]
    assert tile_per_thread({"ROWS": 2, "BLOCK": 4096, "num_warps": 8}) == 32


@pytest.mark.parametrize("sizes", SIZES)
def test_random_genomes_are_valid(family, sizes):
    p = _problem(family, sizes)
    rng = np.random.default_rng(7)
    drawn = [family.random(rng, p, HOPPER) for _ in range(150)]
    for g in drawn:
        assert family.violations(g, p, HOPPER) == [], g
    assert len({g.hash for g in drawn}) > 50  # a varied sample, not repair collapsing everything
    if 16 < sizes[1] <= 32768:  # beyond, a whole row would not fit a thread's registers
        assert {g["mode"] for g in drawn} == {"single", "looped"}


@pytest.mark.parametrize("sizes", SIZES)
def test_repair_of_any_raw_genome_is_valid_and_idempotent(family, sizes):
    p = _problem(family, sizes)
    rng = np.random.default_rng(3)
    for _ in range(200):
        raw = family.make({name: gene.random(rng) for name, gene in family.genes.items()})
        fixed = family.repair(raw, p, HOPPER, rng)
        assert family.violations(fixed, p, HOPPER) == []
        assert family.repair(fixed, p, HOPPER, rng) == fixed  # a valid genome is left alone
        changed = {k for k in raw.as_dict() if raw[k] != fixed[k]}
        if not family.violations(raw, p, HOPPER):
            assert not changed


def test_each_rule_is_detected(family):
    p = _problem(family, (8192, 5000))
    base = family.base(BLOCK=8192)
    assert family.violations(family.make(base), p, HOPPER) == []
    cases = {
        "single pass needs BLOCK >= N=5000": dict(BLOCK=4096),
        "values per thread": dict(num_warps=2),  # 8192 / 64 threads = 128 fp32 values
        "fewer elements than": dict(mode="looped", BLOCK=16, ROWS=2, num_warps=2),
        "shared memory": dict(mode="looped", BLOCK=4096, ROWS=4, num_warps=16, num_stages=4),
    }
    target = Target("90k", 90, 90_000, 132)  # three 32 KiB stages of pipelined loads do not fit
    for reason, change in cases.items():
        values = dict(base, **change)
        found = family.violations(family.make(values), p, target)
        assert any(reason in r for r in found), (reason, found)
        fixed = family.repair(family.make(values), p, target, np.random.default_rng(0))
        assert family.violations(fixed, p, target) == []
    small = _problem(family, (3, 1000))
    assert any("ROWS=8 exceeds M=3" in r for r in family.violations(family.make(dict(base, BLOCK=1024, ROWS=8)),
                                                                       small, HOPPER))
    # wasteful but runnable: a wider single-pass block, a loop whose block covers the row
    for change in (dict(BLOCK=16384, num_warps=16), dict(mode="looped", BLOCK=8192)):
        assert family.violations(family.make(dict(base, **change)), p, HOPPER) == []


@pytest.mark.parametrize("sizes", SIZES[:4])
def test_valid_genomes_stay_valid_on_clipped_problems(family, sizes):
    """What lets an elite transfer to a narrower problem, and the CPU smoke mode run a genome on a problem
    clipped to at most 64 rows and columns."""
    p = _problem(family, sizes)
    rng = np.random.default_rng(4)
    genomes = family.seeds(p, HOPPER) + [family.random(rng, p, HOPPER) for _ in range(100)]
    for clip in (64, 256):
        small = _problem(family, (min(sizes[0], clip), min(sizes[1], clip)), "fp16")
        for g in genomes:
            assert family.violations(g, small, HOPPER) == [], (g, small.key)


def test_repair_moves_few_genes(family):
    rng = np.random.default_rng(0)
    p = _problem(family, (4096, 32768))
    # a single pass over 32768 columns at 8 warps keeps 128 values per thread: more warps fix it
    fixed = family.repair(family.make(family.base(BLOCK=32768, num_warps=8)), p, HOPPER, rng)
    assert fixed["mode"] == "single" and fixed["num_warps"] == 16 and fixed["ROWS"] == 1
    # a single pass too narrow for the row widens to the narrowest covering block
    fixed = family.repair(family.make(family.base(BLOCK=1024, num_warps=16)), p, HOPPER, rng)
    assert fixed["mode"] == "single" and fixed["BLOCK"] == 32768 and fixed["num_warps"] == 16
    # ... and becomes a loop when no block is wide enough
    wide = _problem(family, (64, 100000))
    fixed = family.repair(family.make(family.base(BLOCK=1024, num_warps=16)), wide, HOPPER, rng)
    assert fixed["mode"] == "looped" and fixed["BLOCK"] == 1024
    fixed = family.repair(family.make(family.base(BLOCK=32768, num_warps=16)), wide, HOPPER, rng)
    # (RMSNorm's loop keeps a second tile, the sums of squares: its block halves to fit the registers)
    assert fixed["mode"] == "looped" and fixed["BLOCK"] == (32768 if family.name == "softmax" else 16384)
    # too many rows for a tiny problem
    tiny = _problem(family, (3, 10))
    fixed = family.repair(family.make(family.base(BLOCK=16, ROWS=64, num_warps=1)), tiny, HOPPER, rng)
    assert fixed["ROWS"] == 4


def test_small_shared_memory_lowers_pipelining(family):
    tight = Target("tight", 90, 20000, 4)
    p = _problem(family, (4096, 32768))
    g = family.make(family.base(BLOCK=8192, mode="looped", num_warps=16, num_stages=4))
    assert family.violations(g, p, HOPPER) == [] and family.violations(g, p, tight)
    fixed = family.repair(g, p, tight, np.random.default_rng(0))
    assert fixed["num_stages"] < 4 and family.violations(fixed, p, tight) == []


def test_unrepairable_raises(family):
    only_single = type(family)({"mode": ["single"], "num_warps": [4]})
    p = _problem(only_single, (4096, 32768))
    with pytest.raises(InvalidGenome, match="cannot repair"):
        only_single.random(np.random.default_rng(0), p, HOPPER)


@pytest.mark.parametrize("sizes", SIZES)
def test_seeds_are_valid_distinct_and_include_the_tutorial_kernel(family, sizes):
    p = _problem(family, sizes)
    seeds = family.seeds(p, HOPPER)
    assert seeds and len({g.hash for g in seeds}) == len(seeds)
    for g in seeds:
        assert family.violations(g, p, HOPPER) == []
    n = sizes[1]
    if n <= 32768:  # one row per program, whole row, plain launch
        assert any(g["mode"] == "single" and g["ROWS"] == 1 and g["persistent"] == 0 for g in seeds)
    if n > 2048:
        assert any(g["mode"] == "looped" for g in seeds)
    if n <= 1024 and sizes[0] >= 4:
        assert any(g["ROWS"] > 1 for g in seeds)
    assert family.seeds(p, HOPPER) == seeds  # deterministic


def test_canonical_round_trip_and_overrides(family):
    p = _problem(family, (8192, 8192))
    g = family.random(np.random.default_rng(1), p, HOPPER)
    assert family.from_canonical(g.canonical()) == g and family.from_canonical(g.canonical()).hash == g.hash
    narrowed = type(family)({"mode": ["looped"], "num_warps": [8, 16]})
    rng = np.random.default_rng(2)
    for _ in range(50):
        h = narrowed.random(rng, p, HOPPER)
        assert h["mode"] == "looped" and h["num_warps"] in (8, 16)
    with pytest.raises(InvalidGenome):
        type(family)({"no_such_gene": [1]})
    with pytest.raises(ValueError):
        type(family)({"BLOCK": [3]})


def test_restricted_space_enumerates_valid_genomes(family):
    small = type(family)({"BLOCK": [1024, 2048, 4096, 8192], "ROWS": [1, 2], "persistent": [0, 2],
                          "num_stages": [1, 2], "evict_x": ["none"], "keep_x": ["none"]})
    p = _problem(small, (8192, 5000))
    every = small.enumerate(p, HOPPER)
    assert every and all(small.violations(g, p, HOPPER) == [] for g in every)
    assert {g["mode"] for g in every} == {"single", "looped"}
    assert all(g["BLOCK"] == 8192 for g in every if g["mode"] == "single" and g["split"] == 1)
    # a split single pass covers one chunk: 5000 split 2 ways is 2560 columns, split 4 ways 1280
    assert {g["BLOCK"] for g in every if g["mode"] == "single" and g["split"] == 2} == {4096, 8192}
    assert {g["BLOCK"] for g in every if g["mode"] == "single" and g["split"] == 4} == {2048, 4096, 8192}


def test_descriptors(family):
    p = _problem(family, (8192, 5000))
    rng = np.random.default_rng(5)
    descs = family.descriptors()
    assert {"block", "rows", "num_warps", "looped", "persistent", "elems_per_thread", "registers", "split",
            "reduction"} <= set(descs)
    for _ in range(50):
        g = family.random(rng, p, HOPPER)
        assert descs["block"](g) == np.log2(g["BLOCK"])
        assert descs["looped"](g) == float(g["mode"] == "looped")
        assert descs["rows"](g) == np.log2(g["ROWS"])
        for name, d in descs.items():
            if not d.needs_resources:
                v = d(g)
                assert d.edges[0] <= v <= d.edges[-1], (name, v)
    with pytest.raises(ValueError, match="needs compile-time resources"):
        descs["registers"](g)
    assert descs["registers"](g, {"registers": 96, "shared": 0}) == 96.0


def test_next_pow2():
    assert [next_pow2(n) for n in (1, 2, 3, 16, 17, 5000)] == [1, 2, 4, 16, 32, 8192]
