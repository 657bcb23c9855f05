"""The decode GEMM genome: one rule table for violations and repair, decode seeds that fill the GPU, descriptors."""

from __future__ import annotations

import pytest

from evo.problem import HOPPER, Problem
from genomes.linear import MAX_REGISTERS, LinearFamily, block_m, registers, rules
from tests.genomes._rule_table_checks import check_rule_table

SIZES = [(1, 4096, 4096), (3, 14336, 4096), (16, 4096, 14336), (1, 6144, 4096), (5, 100, 300), (1, 16, 32),
         (64, 4096, 4096)]


def _problem(sizes, dtype="bf16"):
    return Problem.make("linear", ("M", "N", "K"), sizes, dtype)


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("tiles,norm", [(1, False), (2, True)])
def test_rule_table_drives_violations_and_repair(sizes, tiles, norm):
    fam = LinearFamily(tiles=tiles, norm=norm)
    broken = check_rule_table(fam, fam.rules, _problem(sizes), HOPPER, draws=100)
    assert sum(broken.values()) > 0


def test_block_m_pads_for_the_dot_and_rounds_for_fmas():
    assert [block_m({"math": "dot"}, m) for m in (1, 3, 16, 17, 100)] == [16, 16, 16, 32, 64]
    assert [block_m({"math": "fma"}, m) for m in (1, 3, 4, 16, 40)] == [1, 4, 4, 16, 16]


@pytest.mark.parametrize("sizes", [(1, 4096, 4096), (4, 14336, 4096), (16, 4096, 14336), (16, 6144, 4096)])
def test_decode_seeds_fill_the_gpu(sizes):
    fam = LinearFamily()
    p = _problem(sizes)
    seeds = fam.seeds(p, HOPPER)
    assert any(g["math"] == "dot" for g in seeds)
    assert any(g["math"] == "fma" for g in seeds) == (sizes[0] <= 4)
    assert any(g["reduction"] == "ordered" for g in seeds)
    for g in seeds:
        programs = -(-sizes[1] // g["BLOCK_N"]) * g["SPLIT_K"]
        assert programs >= HOPPER.num_sms, str(g)  # every SM streams part of W
        assert registers(g.as_dict(), sizes[0]) <= MAX_REGISTERS


def test_rules_name_what_is_wrong_and_repair_fixes_it():
    fam = LinearFamily()
    p = _problem((16, 4096, 256))
    g = fam.make(fam.base(math="fma", reduce_k="end", BLOCK_N=256, BLOCK_K=1024, SPLIT_K=64, reduction="ordered"))
    reasons = " / ".join(fam.violations(g, p, HOPPER))
    assert "registers per thread" in reasons and "BLOCK_K=1024" not in reasons  # a block wider than K: soft
    fixed = fam.repair(g, p, HOPPER, None)
    assert fam.violations(fixed, p, HOPPER) == []
    assert fixed["SPLIT_K"] <= 256 // fixed["BLOCK_K"] and fixed["BLOCK_K"] <= 256


def test_wasteful_genomes_stay_valid_for_smaller_problems():
    fam = LinearFamily()
    elite = fam.make(fam.base(math="dot", BLOCK_N=64, BLOCK_K=256, SPLIT_K=16, num_stages=3, reduction="ordered"))
    assert fam.violations(elite, _problem((16, 4096, 14336)), HOPPER) == []
    assert fam.violations(elite, _problem((1, 64, 256)), HOPPER) == []  # the smoke mode clips problems


def test_swiglu_and_norm_change_the_rules():
    g = LinearFamily().base(math="fma", BLOCK_N=64, BLOCK_K=256, num_warps=4)
    assert registers(g, 1, tiles=2) > registers(g, 1, tiles=1)
    # the sm_90 compiles the estimate was fitted to: these spilled (or ran out of registers), these did not
    spilled = [dict(BLOCK_N=32, BLOCK_K=256, reduce_k="end", m=4), dict(BLOCK_N=16, BLOCK_K=256, m=16),
               dict(BLOCK_N=32, BLOCK_K=128, m=16)]
    clean = [dict(BLOCK_N=32, BLOCK_K=256, reduce_k="end", m=1), dict(BLOCK_N=16, BLOCK_K=256, reduce_k="end", m=4),
             dict(BLOCK_N=64, BLOCK_K=256, m=1), dict(BLOCK_N=32, BLOCK_K=256, m=4)]
    fam = LinearFamily()
    for case, over in [(c, True) for c in spilled] + [(c, False) for c in clean]:
        m = case.pop("m")
        assert (registers(fam.base(math="fma", num_warps=4, **case), m) > MAX_REGISTERS) == over, case
    assert [r.name for r in rules()] == [r.name for r in rules(2, True)]
    with pytest.raises(ValueError, match="tiles must be 1 or 2"):
        LinearFamily(tiles=3)


def test_descriptors_bin_every_seed():
    fam = LinearFamily()
    for g in fam.seeds(_problem((1, 4096, 4096)), HOPPER):
        for d in fam.descriptors().values():
            assert d.edges[0] <= d(g) <= d.edges[-1], (d.name, str(g))


def test_split_tensor_core_tiles_reduce_in_ordered_slots():
    """Atomic adds of tl.dot tiles summed wrongly on an H100 (reports/gpu/decode-2026-11-27): such a genome is
    invalid and repair orders its reduction, while FMA tiles keep their atomics."""
    fam = LinearFamily()
    p = _problem((4, 4096, 4096))
    dot = fam.make(fam.base(math="dot", BLOCK_N=64, BLOCK_K=128, SPLIT_K=8, reduction="atomic"))
    assert any("ordered slots" in r for r in fam.violations(dot, p, HOPPER))
    assert fam.repair(dot, p, HOPPER, None)["reduction"] == "ordered"
    fma = fam.make(fam.base(math="fma", BLOCK_N=16, BLOCK_K=256, SPLIT_K=2, reduction="atomic"))
    assert not any("ordered slots" in r for r in fam.violations(fma, p, HOPPER))
