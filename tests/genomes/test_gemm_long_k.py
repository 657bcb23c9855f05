"""The GEMM genome's reach into long K over few output tiles (issue 44): split counts up to 128, seeds whose split
makes one wave of the target's SMs, and the rule that bounds the partials' workspace."""

from __future__ import annotations

import numpy as np
import pytest

from evo.problem import HOPPER, Problem
from genomes.gemm import SPLIT_VALUES, GemmFamily, wave_split
from genomes.gemm_rules import SPLIT_WORKSPACE_BYTES, split_workspace_bytes

FAMILY = GemmFamily()


def _problem(shape: tuple[int, int, int], dtype: str = "bf16") -> Problem:
    return Problem.make("gemm", ("M", "N", "K"), shape, dtype)


@pytest.mark.parametrize(("shape", "tile", "split"), [
    ((512, 512, 131072), (128, 128, 64), 8),  # 16 tiles x 8 = 128 programs on 132 SMs
    ((256, 256, 200000), (128, 128, 64), 32),  # 4 tiles
    ((64, 64, 20000), (64, 64, 64), 128),  # one tile
    ((768, 768, 49152), (128, 128, 64), 3),  # 36 tiles: 108 programs (cuBLAS's class; 4 would spill)
    ((4096, 4096, 4096), (128, 128, 64), 1),  # more tiles than SMs
    ((64, 64, 256), (64, 64, 64), 4),  # no more splits than K steps
])
def test_wave_split_fills_one_wave(shape, tile, split):
    assert wave_split(_problem(shape), HOPPER, *tile) == split


def test_long_k_problems_are_seeded_with_tens_of_splits_and_the_seeds_are_valid():
    for shape, least in (((512, 512, 131072), 8), ((256, 768, 200000), 8), ((128, 128, 262144), 32)):
        problem = _problem(shape)
        seeds = FAMILY.seeds(problem, HOPPER)
        assert all(FAMILY.violations(g, problem, HOPPER) == [] for g in seeds)
        triton = [g for g in seeds if g["backend"] == "triton" and g["split_k"] >= least]
        assert len({g["memory"] for g in triton}) >= 2, shape
        assert any(g["backend"] == "gluon" and g["split_k"] >= least for g in seeds), shape
    # more output tiles than SMs: no long-K seeds (a split would not fill anything)
    assert FAMILY._long_k_seeds(_problem((4096, 4096, 4096)), HOPPER) == []


def test_the_split_workspace_is_bounded_and_repair_steps_the_split_down():
    big = _problem((4096, 4096, 16384))
    raw = FAMILY.make(FAMILY.base(split_k=128))
    assert split_workspace_bytes(raw, big) > SPLIT_WORKSPACE_BYTES
    assert any("MiB of fp32 partials" in v for v in FAMILY.violations(raw, big, HOPPER))
    fixed = FAMILY.repair(raw, big, HOPPER, np.random.default_rng(0))
    assert 1 < fixed["split_k"] < 128 and split_workspace_bytes(fixed, big) <= SPLIT_WORKSPACE_BYTES
    small = _problem((512, 512, 131072))
    assert FAMILY.violations(FAMILY.make(FAMILY.base(split_k=128)), small, HOPPER) == []


def test_the_split_gene_reaches_128_and_its_descriptor_tells_the_tens_apart():
    assert FAMILY.genes["split_k"].values == SPLIT_VALUES and SPLIT_VALUES[-1] == 128
    d = FAMILY.descriptors()["split_k"]
    cells = {np.searchsorted(d.edges, d(FAMILY.make(FAMILY.base(split_k=s))), side="right") for s in SPLIT_VALUES}
    assert len(cells) == 8


def test_the_surrogate_sees_the_grid_a_split_makes():
    from evo.search.surrogate import features, genome_features, problem_features

    problem = _problem((512, 512, 131072))
    genome = FAMILY.make(FAMILY.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, split_k=8))
    row = features(FAMILY, genome, problem)
    assert row[:len(FAMILY.genes)] == genome_features(FAMILY, genome)
    assert row[len(FAMILY.genes):-3] == problem_features(problem)
    assert row[-3:] == [4.0, 7.0, 8.0]  # 16 tiles, 128 programs, 256 K steps each
