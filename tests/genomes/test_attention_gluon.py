"""The Gluon backend of the attention genome on the CPU: where it is valid, how repair moves into it and out,
that the genes added for it leave stored genomes' identities alone, and its seeds and structure cells (the GPU
sample, tests/gpu/test_attention_gpu.py, checks the kernels' results)."""

from __future__ import annotations

import json

import numpy as np

import operators
from evo.problem import HOPPER, INTERPRETED_HOPPER, Target
from genomes.attention_gluon import GLUON_FIXED, gluon_smem

OP = operators.get("attention")
FAMILY = OP.family
PREFILL = OP.problem((1, 32, 8, 8192, 8192, 128), "bf16")


def gluon(**values):
    return FAMILY.make(FAMILY.base(**{**GLUON_FIXED, "backend": "gluon", **values}))


def test_gluon_is_valid_on_hopper_for_16_bit_head_dims_64_and_128_only():
    g = gluon(BLOCK_M=64, BLOCK_N=128, num_warps=4, num_stages=3, consumers=2, overlap=True)
    assert FAMILY.violations(g, PREFILL, HOPPER) == []
    assert FAMILY.violations(g, OP.problem((1, 32, 8, 8192, 8192, 64), "fp16"), HOPPER) == []
    assert any("head dims" in r for r in FAMILY.violations(g, OP.problem((1, 32, 8, 512, 512, 80), "bf16"), HOPPER))
    ampere = Target(name="a100", arch=80, num_sms=108, smem_bytes=166912)
    assert any("sm_80" in r for r in FAMILY.violations(g, PREFILL, ampere))
    assert any("interpreter" in r for r in FAMILY.violations(g, PREFILL, INTERPRETED_HOPPER))
    assert any("holds kv_split=1" in r for r in FAMILY.violations(g.replace(kv_split=4), PREFILL, HOPPER))
    assert FAMILY.violations(g.replace(persistent=1), PREFILL, HOPPER) == []
    assert any("persistent 2" in r for r in FAMILY.violations(g.replace(persistent=2), PREFILL, HOPPER))
    assert any("num_warps=4" in r for r in FAMILY.violations(g.replace(num_warps=8, BLOCK_M=128), PREFILL, HOPPER))
    assert any("num_stages >= 2" in r for r in FAMILY.violations(g.replace(num_stages=1), PREFILL, HOPPER))
    assert any("shared memory" in r for r in FAMILY.violations(g.replace(num_stages=4), PREFILL, HOPPER))
    assert FAMILY.violations(g.replace(pingpong=True), PREFILL, HOPPER) == []
    assert any("pingpong" in r for r in FAMILY.violations(g.replace(pingpong=True, overlap=False), PREFILL, HOPPER))
    assert any("fp32 values" in r for r in FAMILY.violations(g.replace(BLOCK_M=128), PREFILL, HOPPER))
    assert any("Gluon rendering" in r for r in FAMILY.violations(FAMILY.make(FAMILY.base(overlap=True)), PREFILL,
                                                                 HOPPER))
    # the shared-memory estimate: two query tiles and three K and V slots of 128 x 128 bf16, and the barriers
    assert gluon_smem(g.as_dict(), PREFILL) == 2 * 128 * (2 * 64 + 2 * 3 * 128) + 8 * 11


def test_repair_moves_a_genome_into_the_gluon_region_or_back_to_triton():
    rng = np.random.default_rng(0)
    raw = FAMILY.make(FAMILY.base(backend="gluon", BLOCK_M=16, BLOCK_N=256, num_warps=16, num_stages=5,
                                  consumers=2, overlap=True, kv_split=8, persistent=2))
    fixed = FAMILY.repair(raw, PREFILL, HOPPER, rng)
    assert fixed["backend"] == "gluon" and fixed["consumers"] == 2 and fixed["num_warps"] == 4
    assert all(fixed[k] == v for k, v in GLUON_FIXED.items()) and FAMILY.violations(fixed, PREFILL, HOPPER) == []
    decode = OP.problem((8, 32, 8, 1, 8192, 128), "bf16")
    for problem, target in ((decode, HOPPER), (PREFILL, INTERPRETED_HOPPER),
                            (OP.problem((1, 8, 8, 512, 512, 80), "fp16"), HOPPER)):
        back = FAMILY.repair(raw, problem, target, rng)
        assert back["backend"] == "triton" and back["consumers"] == 1 and not back["overlap"] and not back["pingpong"]
    lone = FAMILY.repair(raw.replace(consumers=1, pingpong=True), PREFILL, HOPPER, rng)
    assert lone["backend"] == "gluon" and not lone["pingpong"]  # one consumer has no one to take turns with
    kinds = set()
    for _ in range(200):  # random genomes repaired for prefill are valid, of both backends
        g = FAMILY.random(rng, PREFILL, HOPPER)
        assert FAMILY.violations(g, PREFILL, HOPPER) == []
        kinds.add((g["backend"], g["consumers"]))
    assert kinds == {("triton", 1), ("gluon", 1), ("gluon", 2), ("gluon", 3)}


def test_seeds_lead_with_gluon_for_prefill_and_leave_it_out_of_decode_and_the_interpreter():
    seeds = FAMILY.seeds(PREFILL, HOPPER)
    assert seeds[0]["backend"] == "gluon" and seeds[0]["consumers"] == 2 and seeds[0]["overlap"]
    gluon_seeds = [s for s in seeds if s["backend"] == "gluon"]
    assert len(gluon_seeds) == 11 and any(s["pingpong"] for s in gluon_seeds)
    assert any(s["consumers"] == 3 for s in gluon_seeds)
    assert {s["persistent"] for s in gluon_seeds} == {0, 1}
    causal = operators.get("attention+causal").family.seeds(
        operators.get("attention+causal").problem((1, 32, 8, 4096, 4096, 128), "bf16"), HOPPER)
    assert all(s["q_order"] == "reverse" for s in causal if s["backend"] == "gluon")
    assert not any(s["backend"] == "gluon" for s in FAMILY.seeds(OP.problem((8, 32, 8, 1, 8192, 128), "bf16"),
                                                                 HOPPER))
    assert not any(s["backend"] == "gluon" for s in FAMILY.seeds(PREFILL, INTERPRETED_HOPPER))


def test_genes_added_for_gluon_keep_stored_genomes_and_their_hashes():
    triton = FAMILY.make(FAMILY.base())
    genes = json.loads(triton.canonical())["genes"]
    assert not {"backend", "consumers", "overlap", "pingpong"} & set(genes)  # encoded as before the genes existed
    stored = json.dumps({"family": "attention", "genes": genes})
    assert FAMILY.from_canonical(stored) == triton and FAMILY.from_canonical(stored).hash == triton.hash
    g = gluon(consumers=2, num_warps=4, BLOCK_M=64)
    assert FAMILY.from_canonical(g.canonical()) == g


def test_the_structure_cell_names_the_gluon_consumers():
    structure = FAMILY.descriptors()["structure"]
    assert structure.fn(gluon(num_warps=8, BLOCK_M=128), {}) == 4.0
    assert structure.fn(gluon(consumers=2, num_warps=4, BLOCK_M=64), {}) == 5.0
    assert structure.fn(gluon(consumers=2, num_warps=4, BLOCK_M=64, overlap=True, pingpong=True), {}) == 6.0
    assert structure.fn(FAMILY.make(FAMILY.base(pack_gqa=True)), {}) == 1.0


def test_three_consumers_keep_fewer_values_in_their_smaller_register_budget():
    """Three consumers (FlashAttention-3's 192 query rows at head dim 64) share 16 warps' registers: 160 per
    thread of a worker, so they keep at most 112 fp32 values (sm_90 compiles: 128 spilled)."""
    d64 = OP.problem((4, 32, 32, 1024, 1024, 64), "bf16")
    three = FAMILY.make(FAMILY.base(**GLUON_FIXED, backend="gluon", BLOCK_M=64, BLOCK_N=64, num_warps=4,
                                    num_stages=3, consumers=3, overlap=True))
    assert FAMILY.violations(three, d64, HOPPER) == []
    assert any("(> 112 with 3 consumers)" in r for r in FAMILY.violations(three.replace(BLOCK_N=128), d64, HOPPER))
    assert FAMILY.violations(three.replace(BLOCK_N=128, overlap=False), d64, HOPPER) == []
    assert any("num_warps=4" in r for r in FAMILY.violations(three.replace(num_warps=8), d64, HOPPER))
    moved = FAMILY.repair(three.replace(BLOCK_N=256), d64, HOPPER, np.random.default_rng(0))
    assert moved["consumers"] == 3 and FAMILY.violations(moved, d64, HOPPER) == []
    assert FAMILY.descriptors()["structure"].fn(three, {}) == 7.0
    source = OP.render(three, d64, HOPPER)
    assert "    'CONSUMERS': 3,\n" in source and "    'CONSUMER_REGS': 160,\n" in source
