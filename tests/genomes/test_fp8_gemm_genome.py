"""The FP8 GEMM genomes: one rule table for violations and repair in each scale mode (checked on seeded random draws
at decode, prefill and odd shapes), seeds taking swap_ab with a split at decode and big tiles at prefill, rules that
name what is wrong."""

from __future__ import annotations

import pytest

from evo.problem import HOPPER, Problem
from genomes.fp8_gemm import (
    MAX_ACC_REGISTERS,
    MODES,
    SCALE_BLOCK,
    FP8GemmFamily,
    accumulator_registers,
    shared_bytes,
)
from tests.genomes._rule_table_checks import check_rule_table

# (M, N, K): Llama-3-8B's projections at decode and prefill, odd sizes (block mode: K a multiple of 128)
SIZES = [(16, 6144, 4096), (2048, 28672, 4096), (2048, 4096, 14336), (1, 4096, 4096), (7, 1000, 384)]


def _problem(sizes, dtype="bf16"):
    return Problem.make("fp8_gemm", ("M", "N", "K"), sizes, dtype)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("mode", MODES)
def test_rule_table_drives_violations_and_repair(sizes, mode):
    fam = FP8GemmFamily(mode=mode)
    broken = check_rule_table(fam, fam.rules, _problem(sizes), HOPPER, draws=80, seed=sum(sizes) + len(mode))
    assert broken["registers"] > 0 and broken["smem_fits"] > 0
    if mode == "block":
        assert broken["step_in_one_group"] > 0 and broken["promote_canonical"] > 0
    else:
        assert broken["step_in_one_group"] == 0 and broken["promote_canonical"] == 0


@pytest.mark.parametrize("mode", MODES)
def test_decode_seeds_swap_and_split_and_prefill_seeds_take_big_tiles(mode):
    fam = FP8GemmFamily(mode=mode)
    decode = fam.seeds(_problem((16, 4096, 4096)), HOPPER)
    swapped = [g for g in decode if g["swap_ab"]]
    assert swapped and all(g["BLOCK_M"] == 16 for g in swapped) and any(g["SPLIT_K"] > 1 for g in swapped)
    prefill = fam.seeds(_problem((2048, 14336, 4096)), HOPPER)
    assert not any(g["swap_ab"] for g in prefill)
    assert any(g["BLOCK_M"] == 128 and g["BLOCK_N"] >= 128 and g["GROUP_M"] > 1 for g in prefill)
    assert any(g["promote"] for g in prefill) == (mode != "block")
    for g in decode + prefill:
        assert accumulator_registers(g.as_dict(), mode == "block") <= MAX_ACC_REGISTERS
        assert shared_bytes(g.as_dict()) <= HOPPER.smem_bytes
        assert mode != "block" or g["BLOCK_K"] <= SCALE_BLOCK


def test_rules_name_what_is_wrong_and_repair_fixes_it():
    fam = FP8GemmFamily(mode="block")
    p = _problem((2048, 4096, 4096))
    g = fam.make(fam.base(BLOCK_M=256, BLOCK_N=256, BLOCK_K=256, num_warps=4, num_stages=6, promote=True))
    reasons = " / ".join(fam.violations(g, p, HOPPER))
    assert "BLOCK_K=256 spans more than one 128-wide scale group" in reasons
    assert "promote=False" in reasons and "registers per thread" in reasons and "bytes of shared memory" in reasons
    fixed = fam.repair(g, p, HOPPER, None)
    assert fam.violations(fixed, p, HOPPER) == [] and fixed["BLOCK_K"] == 128 and not fixed["promote"]
    # per-tensor scales take the same genome's K step and promotion as they are
    tensor = FP8GemmFamily(mode="tensor")
    assert not any("scale group" in r or "promote" in r for r in tensor.violations(g, p, HOPPER))


def test_a_scale_mode_that_does_not_exist_is_refused():
    with pytest.raises(ValueError, match="scale mode must be one of tensor, channel, block; got 'row'"):
        FP8GemmFamily(mode="row")


def test_block_scales_need_whole_groups_of_k():
    """The problem's own rule (no gene moves it): a smoke run's clipped K of 64 is refused, so it clips to 128."""
    fam = FP8GemmFamily(mode="block")
    g = fam.make(fam.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32))
    assert fam.violations(g, _problem((16, 256, 64)), HOPPER) == [
        "K=64 is not a multiple of 128: block scales cover whole 1x128 groups of K"]
    assert fam.violations(g, _problem((16, 256, 128)), HOPPER) == []
    assert FP8GemmFamily(mode="channel").violations(g, _problem((16, 256, 64)), HOPPER) == []


def test_tensor_descriptors_need_rows_of_16_bytes():
    fam = FP8GemmFamily(mode="channel")
    g = fam.make(fam.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, memory="descriptor"))
    assert fam.violations(g, _problem((16, 256, 100)), HOPPER) == [
        "tensor descriptors need rows of 16-byte multiples; K=100 bytes of e4m3 is not"]
    assert fam.repair(g, _problem((16, 256, 100)), HOPPER, None)["memory"] == "pointer"
    assert fam.violations(g, _problem((16, 256, 112)), HOPPER) == []


def test_promotion_counts_a_second_accumulator():
    """128x256 at 8 warps with promotion spilled on sm_90 (255 registers): refused, repaired by dropping promotion
    (8 warps is the most), kept as it is without promotion."""
    fam = FP8GemmFamily(mode="channel")
    p = _problem((2048, 28672, 4096))
    wide = fam.base(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3)
    assert accumulator_registers(dict(wide, promote=True), block=False) == 256
    assert any("registers per thread" in r for r in fam.violations(fam.make(dict(wide, promote=True)), p, HOPPER))
    assert fam.violations(fam.make(wide), p, HOPPER) == []
    fixed = fam.repair(fam.make(dict(wide, promote=True)), p, HOPPER, None)
    assert not fixed["promote"] and fixed["BLOCK_N"] == 256


def test_a_persistent_grid_needs_more_items_than_programs_and_stages_its_output():
    fam = FP8GemmFamily(mode="tensor")
    g = fam.base(BLOCK_M=128, BLOCK_N=128, num_stages=4, num_warps=8, memory="descriptor", persistent=1)
    assert shared_bytes(g) == 163840 and shared_bytes(dict(g, persistent=0)) == 131072  # as sm_90 compiled them
    big, small = _problem((2048, 28672, 4096)), _problem((256, 4096, 4096))  # 3584 and 64 tiles, 132 SMs
    assert fam.violations(fam.make(g), big, HOPPER) == fam.violations(fam.make(g), small, HOPPER) == []
    assert fam.repair(fam.make(g), big, HOPPER, None)["persistent"] == 1
    assert fam.repair(fam.make(g), small, HOPPER, None)["persistent"] == 0  # soft: no more items than programs
