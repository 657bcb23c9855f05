"""Gemma 2's gate_up above 16 tokens as the zoo plans it (evo.zoo.gemma_problems: `gemm+geglu` on B = [gate | up]):
a rendered gemm+geglu kernel patched into the reference Gemma-2 layer's gate_up role (evo.zoo.layer_gemma) gives the
layer's own output, in the Triton interpreter (fp32), and the plan's problem has the shape the patched call makes."""

from __future__ import annotations

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from evo.zoo import parse_model
from evo.zoo.layer_gemma import Gemma2DecoderLayer
from evo.zoo.patch import patch, unpatch
from evo.zoo.problems import layer_problems

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's sigmoid

SPEC = ("name: gate-up-gemma\nhidden_size: 64\nintermediate_size: 96\nnum_attention_heads: 4\nnum_key_value_heads: 2\n"
        "head_dim: 16\nvocab_size: 256\nmlp: geglu\nnorm: gemma_rmsnorm\npost_norms: true\n"
        "attn_logit_softcapping: 50.0\nquery_pre_attn_scalar: 16\n")
TOKENS = 20  # above the linear roles' 16: the plan's gemm roles


def test_a_patched_gemm_geglu_gives_the_layers_own_output():
    spec = parse_model(SPEC, "yaml", "g.yaml")
    (plan,) = [p for p in layer_problems(spec, [TOKENS], "fp32", context=0) if p.role == "gate_up"]
    assert plan.operator == "gemm+geglu" and plan.sizes == (TOKENS, 96, 64)
    op = operators.get(plan.operator)
    problem = op.problem(plan.sizes, "fp32")
    genome = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32))
    kernel = load_source(op.render(genome, problem, HOPPER)).matmul
    calls = []

    def gate_up(a, b):
        calls.append((tuple(a.shape), tuple(b.shape)))
        return kernel(a, b)

    layer = Gemma2DecoderLayer(spec, dtype=torch.float32, seed=3)
    x = torch.randn(TOKENS, 64, generator=torch.Generator().manual_seed(0))
    want = layer(x)
    patch(layer, {"gate_up": gate_up})
    got = layer(x)
    assert calls == [((TOKENS, 64), (64, 192))]  # A = the pre-feedforward-normed rows, B = [gate | up]
    assert float((got - want).norm() / want.norm()) < 1e-5
    # the comparison sees the gate: SiLU's in its place does not give the layer's output
    unpatch(layer)
    patch(layer, {"gate_up": lambda a, b: torch.nn.functional.silu(a @ b[:, :96]) * (a @ b[:, 96:])})
    assert float((layer(x) - want).norm() / want.norm()) > 1e-3
