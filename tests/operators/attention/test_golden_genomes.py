"""Every Triton genome the attention goldens keep (tests/golden/files/manifest.json: one per schedule, so every
combination of switches the goldens cover) rendered for a small problem with the same GQA group and head dim and run
in the interpreter against the fp32 reference, in fp16 and in fp32, twice (the plan, its partials and its counters
reused). The goldens prove the text; this proves the text computes attention."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from tests.golden.goldens import MANIFEST

SMALL_GPU = dataclasses.replace(HOPPER, num_sms=3)  # persistent grids smaller than the work
ENTRIES = [e for e in json.loads(MANIFEST.read_text()) if e["operator"].startswith("attention")
           and json.loads(e["genome"])["genes"].get("backend", "triton") == "triton"]


def _small(sizes: list[int], causal: bool) -> tuple[int, ...]:
    b, hq, hkv, n_q, n_k, d = sizes
    n_q = min(n_q, 17)  # ragged row tiles: two of BLOCK_M 16, packed by GQA two or three of 16 and 32
    return (min(b, 2), 2 * (hq // hkv), 2, n_q, max(n_q, min(n_k, 70)) if causal else min(n_k, 70), d)


def _error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm()).item()


def test_the_goldens_keep_triton_genomes_of_every_switch():
    genes = [json.loads(e["genome"])["genes"] for e in ENTRIES]
    assert len(ENTRIES) >= 30
    for name, value in (("pack_gqa", True), ("reduce", "last_program"), ("mask_loop", "masked"),
                        ("q_order", "reverse"), ("grid", "heads_first"), ("kv_load", "tma"), ("persistent", 2)):
        assert any(g.get(name) == value for g in genes), name


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["file"].removesuffix(".py.golden") for e in ENTRIES])
def test_a_golden_genome_computes_attention(entry):
    op = operators.get(entry["operator"])
    genome = op.family.from_canonical(entry["genome"])
    problem = op.problem(_small(entry["sizes"], op.causal), "fp16")
    assert op.family.violations(genome, problem, SMALL_GPU) == []
    module = load_source(op.render(genome, problem, SMALL_GPU))
    for seed in (11, 12):
        inputs = op.make_inputs(problem, seed=seed, device="cpu")
        ref = op.reference(*inputs)
        out = module.attention(*inputs)
        assert out.dtype == torch.float16 and _error(out, ref) < op.tolerance(problem)
    # the kernel in fp32 (the operator searches fp16 and bf16; fp32 tl.dot is exact in the interpreter)
    assert _error(module.attention(*(t.float() for t in inputs)), ref) < 1e-5
