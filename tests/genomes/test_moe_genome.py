"""The MoE expert GEMM genomes: one rule table for violations and repair (checked on seeded random draws at decode,
prefill and odd shapes), seeds with the small-M path at decode and grouped-GEMM tiles at prefill, rules that name
what is wrong."""

from __future__ import annotations

import pytest

from evo.problem import HOPPER, Problem
from genomes.moe import DIMS, MAX_REGISTERS, MoEDownFamily, MoEGateUpFamily, registers, smem_bytes
from tests.genomes._rule_table_checks import check_rule_table

# (T, E, TOPK, N, K): Mixtral-8x7B decode and prefill, Qwen1.5-MoE (60 experts, top-4), top-1, odd sizes
SIZES = [(1, 8, 2, 14336, 4096), (16, 8, 2, 14336, 4096), (2048, 8, 2, 14336, 4096), (4, 60, 4, 1408, 2048),
         (512, 60, 4, 1408, 2048), (7, 5, 1, 100, 72), (2048, 8, 2, 4096, 14336)]
FAMILIES = [MoEGateUpFamily, MoEDownFamily]


def _problem(name, sizes, dtype="bf16"):
    return Problem.make(name, DIMS, sizes, dtype)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_rule_table_drives_violations_and_repair(sizes, family, dtype):
    fam = family()
    broken = check_rule_table(fam, fam.rules, _problem(fam.name, sizes, dtype), HOPPER, draws=80, seed=sum(sizes))
    assert sum(broken.values()) > 0
    assert broken["canonical_group"] > 0  # half the draws are tile-major, most of those with a group


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_seeds_take_the_small_m_path_and_prefill_seeds_the_grouped_tiles(family):
    fam = family()
    decode = fam.seeds(_problem(fam.name, (4, 8, 2, 14336, 4096)), HOPPER)
    assert decode and all(g["BLOCK_M"] == 16 and g["swap_ab"] for g in decode)
    assert {g["work"] for g in decode} == {"expert_major", "tile_major"} and any(g["persistent"] for g in decode)
    assert {g["routing"] for g in decode} == {"torch", "in_kernel"}  # 8 slots: a program sorts them itself
    prefill = fam.seeds(_problem(fam.name, (2048, 8, 2, 14336, 4096)), HOPPER)
    assert any(g["BLOCK_M"] >= 64 and not g["swap_ab"] and g["GROUP_M"] > 1 for g in prefill)
    assert {g["routing"] for g in prefill} == {"torch"}
    if fam.name == "moe_down":
        assert {g["combine"] for g in prefill} == {"in_kernel", "torch_sum"}
        top1 = fam.seeds(_problem(fam.name, (64, 8, 1, 4096, 14336)), HOPPER)
        assert {g["combine"] for g in top1} == {"in_kernel"}
    for g in decode + prefill:
        assert registers(g.as_dict(), "bf16", fam.tiles) <= MAX_REGISTERS
        assert smem_bytes(g.as_dict(), "bf16", fam.tiles) <= HOPPER.smem_bytes


def test_rules_name_what_is_wrong_and_repair_fixes_it():
    fam = MoEGateUpFamily()
    p = _problem(fam.name, (2048, 8, 2, 14336, 4096))
    g = fam.make(fam.base(BLOCK_M=128, BLOCK_N=256, BLOCK_K=256, num_warps=2, num_stages=5, work="tile_major",
                          GROUP_M=8))
    reasons = " / ".join(fam.violations(g, p, HOPPER))
    assert "registers per thread" in reasons and "bytes of shared memory" in reasons and "GROUP_M=1" in reasons
    fixed = fam.repair(g, p, HOPPER, None)
    assert fam.violations(fixed, p, HOPPER) == [] and fixed["GROUP_M"] == 1 and fixed["work"] == "tile_major"
    down = MoEDownFamily()
    top1 = _problem(down.name, (16, 8, 1, 4096, 14336))
    assert "combine=in_kernel" in " ".join(down.violations(down.make(down.base(combine="torch_sum")), top1, HOPPER))


def test_wasteful_genomes_stay_valid_for_smaller_problems():
    fam = MoEGateUpFamily()
    elite = fam.make(fam.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, GROUP_M=8))
    assert fam.violations(elite, _problem(fam.name, (2048, 8, 2, 14336, 4096)), HOPPER) == []
    assert fam.violations(elite, _problem(fam.name, (1, 8, 2, 64, 32)), HOPPER) == []  # taller and wider: soft
