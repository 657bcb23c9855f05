"""The attention genome: seeds and random draws valid on decode and prefill problems, validity naming what is wrong,
repair to the sensible forms, descriptors."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.problem import HOPPER, Problem
from genomes.attention import AttentionFamily, live_limit

DIMS = ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim")
DECODE = Problem.make("attention", DIMS,
                      (4, 32, 8, 1, 8192, 128), "bf16")
PREFILL = Problem.make("attention", DIMS, (1, 32, 32, 4096, 4096, 64), "fp16")
ODD = Problem.make("attention", DIMS, (2, 12, 4, 37, 301, 80), "fp16")


@pytest.fixture(scope="module")
def family():
    return AttentionFamily()


@pytest.mark.parametrize("problem", [DECODE, PREFILL, ODD], ids=["decode", "prefill", "odd"])
def test_seeds_and_random_draws_are_valid_and_distinct(family, problem):
    seeds = family.seeds(problem, HOPPER)
    assert len(seeds) >= 6 and len({s.hash for s in seeds}) == len(seeds)
    rng = np.random.default_rng(3)
    for g in seeds + [family.random(rng, problem, HOPPER) for _ in range(200)]:
        assert family.violations(g, problem, HOPPER) == [], g


def test_decode_seeds_pack_the_group_and_split_the_keys(family):
    seeds = family.seeds(DECODE, HOPPER)
    packed = [s for s in seeds if s["pack_gqa"] and s["kv_split"] > 1]
    assert packed and {s["reduce"] for s in packed} == {"launch", "last_program"}
    # 4 x 8 KV heads of one tile each: the splits bring the programs to about two per SM
    assert max(s["kv_split"] for s in packed) == 8


def test_short_queries_start_with_the_decode_seeds_and_prefill_with_the_tiles(family):
    """A search cut short by its wall clock evaluates the first seeds: decode's must lead for short queries."""
    decode = family.seeds(DECODE, HOPPER)
    split = [s["pack_gqa"] and s["kv_split"] > 1 for s in decode]
    assert all(split[:6]) and not all(split) and decode[0]["reduce"] == "last_program"
    prefill = family.seeds(PREFILL, HOPPER)  # the Gluon (FlashAttention-3) forms first, then Triton's prefill tiles
    triton = [s for s in prefill if s["backend"] == "triton"]
    assert prefill[0]["backend"] == "gluon" and (triton[0]["BLOCK_M"], triton[0]["kv_split"]) == (128, 1)


def test_without_gqa_nothing_is_packed(family):
    assert not any(s["pack_gqa"] for s in family.seeds(PREFILL, HOPPER))
    g = family.make(family.base(pack_gqa=True))
    assert any("nothing to pack" in r for r in family.violations(g, PREFILL, HOPPER))
    assert family.repair(g, PREFILL, HOPPER, np.random.default_rng(0))["pack_gqa"] is False


def test_violations_name_registers_shared_memory_and_a_lone_reduce(family):
    big = family.make(family.base(BLOCK_M=256, BLOCK_N=256, num_warps=2))
    assert any(f"(> {live_limit(2)} at 2 warps)" in r for r in family.violations(big, PREFILL, HOPPER))
    # 16 warps leave a thread 128 registers: a 256x128 tile at head dim 128 (128 live values) no longer fits
    wide = family.make(family.base(BLOCK_M=256, BLOCK_N=128, num_warps=16, num_stages=1))
    assert live_limit(16) == 96 and live_limit(4) == 160
    assert family.violations(wide, PREFILL, HOPPER) == []  # head dim 64: 96 live
    assert any("at 16 warps" in r for r in family.violations(wide, DECODE, HOPPER))
    deep = family.make(family.base(BLOCK_M=128, BLOCK_N=256, num_warps=16, num_stages=5))
    assert any("shared memory" in r for r in family.violations(deep, DECODE, HOPPER))
    lone = family.make(family.base(reduce="last_program"))
    assert any("only a kv_split > 1" in r for r in family.violations(lone, PREFILL, HOPPER))
    uneven = Problem.make("attention", DIMS, (1, 12, 8, 1, 64, 64), "fp16")
    assert "not a multiple" in family.violations(family.make(family.base()), uneven, HOPPER)[0]


def test_more_splits_than_key_blocks_is_wasteful_but_valid_and_repair_trims_it(family):
    short = Problem.make("attention", DIMS, (1, 8, 8, 1, 100, 64), "fp16")
    g = family.make(family.base(BLOCK_M=16, BLOCK_N=64, num_warps=4, kv_split=16))
    assert family.violations(g, short, HOPPER) == []  # still runs a clipped or shorter problem
    assert family.repair(g, short, HOPPER, np.random.default_rng(0))["kv_split"] == 2


def test_descriptors_place_every_seed(family):
    descriptors = family.descriptors()
    for g in family.seeds(DECODE, HOPPER):
        assert descriptors["structure"](g) == float(g["pack_gqa"]) + 2.0 * (g["kv_split"] > 1)
        assert 8 <= descriptors["tile"](g) <= 16


def test_the_operator_refuses_impossible_problems_in_one_line():
    with pytest.raises(ValueError, match="not a multiple"):
        operators.get("attention").problem((1, 12, 8, 16, 16, 64), "fp16")
    with pytest.raises(ValueError, match="q_len <= kv_len"):
        operators.get("attention+causal").problem((1, 8, 8, 32, 16, 64), "fp16")
    with pytest.raises(ValueError, match="the options causal, softcap<cap> and window<keys>"):
        operators.get("attention+sliding")
    with pytest.raises(ValueError, match="does not support dtype"):
        operators.get("attention").problem((1, 8, 8, 16, 16, 64), "fp32")


def test_persistent_programs_must_fit_one_sm_together(family):
    g = family.make(family.base(persistent=2))  # 128x64 tiles, 3 stages at head dim 128: ~128 KiB each
    assert any("do not fit one SM together" in r for r in family.violations(g, DECODE.__class__.make(
        "attention", DIMS, (1, 32, 8, 4096, 4096, 128), "bf16"), HOPPER))
    assert family.repair(g, PREFILL, HOPPER, np.random.default_rng(0))["persistent"] == 2  # head dim 64: they fit
