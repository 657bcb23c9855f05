"""The cache-attention genome: one rule table for violations and repair, seeds that fill the GPU, the registers it
counts."""

from __future__ import annotations

import pytest

from evo.problem import HOPPER, Problem
from genomes.cache_attention import MAX_REGISTERS, CacheAttentionFamily, registers, rows
from tests.genomes._rule_table_checks import check_rule_table

DIMS = ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim")
SIZES = [(1, 32, 8, 1, 4097, 128), (1, 32, 8, 16, 4112, 128), (1, 28, 4, 1, 2177, 128), (2, 8, 8, 3, 70, 64),
         (1, 32, 8, 1, 20, 64)]


def _problem(sizes, dtype="bf16"):
    return Problem.make("cache_attention", DIMS, sizes, dtype)


@pytest.mark.parametrize("sizes", SIZES)
def test_rule_table_drives_violations_and_repair(sizes):
    fam = CacheAttentionFamily()
    broken = check_rule_table(fam, fam.rules, _problem(sizes), HOPPER, draws=100)
    assert sum(broken.values()) > 0


def test_rows_pad_the_grouped_queries_for_the_dot():
    assert [rows(_problem(s)) for s in SIZES] == [16, 64, 16, 16, 16]


def test_seeds_fill_the_gpu_and_keep_the_registers():
    fam = CacheAttentionFamily()
    p = _problem((1, 32, 8, 1, 4097, 128))
    seeds = fam.seeds(p, HOPPER)
    assert seeds and all(not fam.violations(s, p, HOPPER) for s in seeds)
    assert max(8 * s["SPLITS"] for s in seeds) >= HOPPER.num_sms
    assert all(registers(s.as_dict(), p) <= MAX_REGISTERS for s in seeds)
