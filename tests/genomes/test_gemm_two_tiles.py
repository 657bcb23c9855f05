"""GemmFamily for kernels that read two B tiles per K step (b_tiles=2: the fused SwiGLU epilogue), an epilogue
that reads a tile of another tensor (reads_tile: a residual) and one that refuses warp specialization
(ws_refusal): their validity rules, repair, resource counts and seeds."""

from __future__ import annotations

import numpy as np
import pytest

from evo.problem import HOPPER, Problem
from genomes.gemm import (
    ELEM_BYTES,
    MAX_ACC_REGS,
    TWO_TILE_REFUSALS,
    GemmFamily,
    acc_regs_per_thread,
    column_blocks,
    smem_estimate,
)

ONE, TWO = GemmFamily(), GemmFamily(b_tiles=2)


def problem(m: int, n: int, k: int, dtype: str = "bf16") -> Problem:
    return Problem.make("gemm", ("M", "N", "K"), (m, n, k), dtype)


BIG = problem(4096, 4096, 4096)
UNALIGNED = problem(1000, 1001, 2000, "fp16")  # N of 2002 bytes: no tensor descriptors without padded rows
PROBLEMS = [BIG, UNALIGNED, problem(16, 14336, 4096), problem(67, 45, 93, "fp16"), problem(2048, 14336, 4096),
            problem(37, 50, 40, "fp32")]


def _swiglu_reasons(family: GemmFamily, values: dict, prob: Problem) -> list[str]:
    return [r for r in family.violations(family.make(family.base(**values)), prob, HOPPER) if "SwiGLU" in r]


@pytest.mark.parametrize("values, prob, what", [
    (dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, split_k=4), BIG, "split-K"),
    (dict(persistent=True, stream_k=True), BIG, "stream-K"),
    (dict(memory="descriptor", warp_specialize=True, num_stages=4), BIG, "warp specialization"),
    (dict(memory="host_descriptor", pad_rows=True), UNALIGNED, "padded rows"),
    (dict(BLOCK_N=96), BIG, "BLOCK_N=96"),
    (dict(BLOCK_N=192, num_warps=8), BIG, "BLOCK_N=192"),
])
def test_two_tile_refusals_name_swiglu(values, prob, what):
    reasons = _swiglu_reasons(TWO, values, prob)
    assert len(reasons) == 1 and what in reasons[0], reasons
    # the same genome in the one-tile family: nothing about SwiGLU, and valid
    assert not _swiglu_reasons(ONE, values, prob)
    assert ONE.violations(ONE.make(ONE.base(**values)), prob, HOPPER) == []


def test_the_refusals_cover_every_two_tile_gene():
    assert {gene for gene, _, _ in TWO_TILE_REFUSALS} == {"split_k", "stream_k", "warp_specialize", "pad_rows"}
    plain = TWO.make(TWO.base(num_warps=8))  # base()'s 4 warps: 256 accumulator registers per thread for two
    assert any("accumulator" in r for r in TWO.violations(TWO.make(TWO.base()), BIG, HOPPER))
    assert TWO.violations(plain, BIG, HOPPER) == []
    for n in (16, 32, 64, 128, 256):  # power-of-two widths stay allowed
        assert not _swiglu_reasons(TWO, dict(BLOCK_N=n, num_warps=8), BIG)


def test_b_tiles_must_be_one_or_two():
    with pytest.raises(ValueError, match="b_tiles must be 1 or 2"):
        GemmFamily(b_tiles=3)


@pytest.mark.parametrize("prob", PROBLEMS, ids=lambda p: p.key)
def test_repair_of_random_raw_genomes_is_valid(prob):
    rng = np.random.default_rng(7)
    for _ in range(60):
        raw = TWO.make({name: gene.random(rng) for name, gene in TWO.genes.items()})
        genome = TWO.repair(raw, prob, HOPPER, rng)
        assert TWO.violations(genome, prob, HOPPER) == [], str(genome)
        assert all(genome[gene] == off for gene, off, _ in TWO_TILE_REFUSALS)
        assert len(column_blocks(genome["BLOCK_N"])) == 1
        assert acc_regs_per_thread(genome.as_dict(), 2) <= MAX_ACC_REGS
        assert smem_estimate(genome.as_dict(), prob.dtype, 2) <= HOPPER.smem_bytes
    # random() (draw and repair) as well, for a residual epilogue too
    both = GemmFamily(b_tiles=2, reads_tile=True, ws_refusal="is refused here")
    for seed in range(20):
        genome = both.random(np.random.default_rng(seed), prob, HOPPER)
        assert both.violations(genome, prob, HOPPER) == [] and not genome["warp_specialize"]


def test_unaligned_n_keeps_no_tensor_descriptors_for_two_tiles():
    """The one-tile family pads unaligned rows to keep host descriptors; the two-tile one falls back to pointers."""
    values = dict(memory="host_descriptor", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
    rng = np.random.default_rng(0)
    one = ONE.repair(ONE.make(ONE.base(**values)), UNALIGNED, HOPPER, rng)
    two = TWO.repair(TWO.make(TWO.base(**values)), UNALIGNED, HOPPER, rng)
    assert (one["memory"], one["pad_rows"]) == ("host_descriptor", True)
    assert (two["memory"], two["pad_rows"]) == ("pointer", False)


@pytest.mark.parametrize("values", [
    dict(),
    dict(BLOCK_M=64, BLOCK_N=256, BLOCK_K=32, num_stages=4, loop_unroll=2),
    dict(memory="host_descriptor", persistent=True, epilogue_subtile=True),
    dict(memory="descriptor", num_stages=2, loop_stages=4),
    dict(persistent=True, num_stages=5),
])
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_two_tiles_double_the_b_buffers_and_the_accumulators(values, dtype):
    g = ONE.base(**values)
    e = ELEM_BYTES[dtype]
    tma = g["memory"] != "pointer"
    stages = (g["loop_stages"] or g["num_stages"]) + (1 if g["persistent"] and not tma else 0)
    b_part = stages * g["BLOCK_K"] * g["BLOCK_N"] * e * g["loop_unroll"]
    one, two = smem_estimate(g, dtype, 1), smem_estimate(g, dtype, 2)
    if not tma or g["persistent"]:  # (a plain TMA kernel's estimate is the larger of operands and output)
        assert two - one == b_part
    else:
        assert two >= one + b_part - g["BLOCK_M"] * g["BLOCK_N"] * e
    assert TWO._smem(g, dtype) == two and ONE._smem(g, dtype) == one
    assert acc_regs_per_thread(g, 2) == 2 * acc_regs_per_thread(g, 1)


def test_two_tiles_refuse_what_only_the_doubled_counts_exceed():
    # 128 accumulator registers per thread for one tile: the limit; two tiles need 256
    wide = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=32, num_warps=8, num_stages=2)
    assert ONE.violations(ONE.make(ONE.base(**wide)), BIG, HOPPER) == []
    assert any("accumulator needs 256 registers" in r for r in TWO.violations(TWO.make(TWO.base(**wide)), BIG, HOPPER))
    # 192 KiB of shared memory for one B tile per stage (fits 227 KiB), 272 KiB for two
    deep = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=5, persistent=True,
                memory="host_descriptor")
    assert ONE.violations(ONE.make(ONE.base(**deep)), BIG, HOPPER) == []
    assert any("shared memory" in r for r in TWO.violations(TWO.make(TWO.base(**deep)), BIG, HOPPER))
    repaired = TWO.repair(TWO.make(TWO.base(**deep)), BIG, HOPPER, np.random.default_rng(0))
    assert TWO.violations(repaired, BIG, HOPPER) == []


@pytest.mark.parametrize("values", [
    dict(), dict(BLOCK_N=192, BLOCK_M=64), dict(BLOCK_N=96, memory="host_descriptor", persistent=True),
    dict(BLOCK_M=64, BLOCK_N=32, epilogue_subtile=True, memory="descriptor"),
])
@pytest.mark.parametrize("b_tiles", [1, 2])
def test_reads_tile_adds_one_column_block_of_the_tile(values, b_tiles):
    for dtype in ("fp16", "fp32"):
        g = ONE.base(**values)
        added = smem_estimate(g, dtype, b_tiles, reads_tile=True) - smem_estimate(g, dtype, b_tiles)
        assert added == g["BLOCK_M"] * column_blocks(g["BLOCK_N"])[0] * ELEM_BYTES[dtype]
        family = GemmFamily(b_tiles=b_tiles, reads_tile=True)
        assert family._smem(g, dtype) == smem_estimate(g, dtype, b_tiles, True)


def test_reads_tile_refuses_a_genome_that_fits_only_without_it():
    # the measured case (smem_estimate's docstring): 128x192 persistent host-TMA tiles of 4 stages
    g = dict(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_warps=8, num_stages=4, persistent=True,
             memory="host_descriptor")
    residual = GemmFamily(reads_tile=True)
    assert ONE.violations(ONE.make(ONE.base(**g)), BIG, HOPPER) == []
    assert smem_estimate(ONE.base(**g), "bf16", 1, True) == 245760
    assert any("shared memory" in r for r in residual.violations(residual.make(residual.base(**g)), BIG, HOPPER))


def test_ws_refusal_makes_warp_specialization_a_violation_that_repair_removes():
    ws = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, memory="descriptor", warp_specialize=True, num_stages=4)
    assert ONE.violations(ONE.make(ONE.base(**ws)), BIG, HOPPER) == []
    refusing = GemmFamily(ws_refusal="gave wrong results here")
    genome = refusing.make(refusing.base(**ws))
    assert refusing.violations(genome, BIG, HOPPER) == ["warp specialization gave wrong results here"]
    repaired = refusing.repair(genome, BIG, HOPPER, np.random.default_rng(0))
    assert not repaired["warp_specialize"] and refusing.violations(repaired, BIG, HOPPER) == []
    assert repaired.replace(warp_specialize=True) == genome  # nothing else changed
    # its seeds (one of which asks for warp specialization) are valid, none warp-specialized
    seeds = refusing.seeds(BIG, HOPPER)
    assert seeds and not any(s["warp_specialize"] for s in seeds)
    assert any(s["warp_specialize"] for s in ONE.seeds(BIG, HOPPER))


@pytest.mark.parametrize("prob", [problem(2048, 14336, 4096), problem(16, 14336, 4096)], ids=lambda p: p.key)
def test_two_tile_seeds_are_valid(prob):
    for family in (TWO, GemmFamily(b_tiles=2, reads_tile=True, ws_refusal="is refused")):
        seeds = family.seeds(prob, HOPPER)
        assert len(seeds) >= 8 and len({s.hash for s in seeds}) == len(seeds)
        for s in seeds:
            assert family.violations(s, prob, HOPPER) == [], str(s)
            assert all(s[gene] == off for gene, off, _ in TWO_TILE_REFUSALS)
        # the SwiGLU seeds: 128x128 tiles over host descriptors, persistent and not
        assert any(s["memory"] == "host_descriptor" and s["persistent"] for s in seeds)
        assert any(s["memory"] == "host_descriptor" and not s["persistent"] for s in seeds)
