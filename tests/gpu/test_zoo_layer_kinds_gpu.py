"""The MoE and Gemma-2 layers on a GPU (evo.bench.zoo_layer.measure_layer, bf16): four ways on both clocks, the zoo
ways with evo kernels rendered from each operator's seed for the plan's roles, every output within tolerance; the MoE
layer's torch experts through torch._grouped_mm compile and capture, transformers' eager loop does neither (its
failures say why); the Gemma-2 layer's torch attention eager or FlexAttention. Run on the GPU machine:
    python3 -m pytest tests/gpu/test_zoo_layer_kinds_gpu.py -q
(a few minutes: torch.compile max-autotune of small layers, four token counts)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from evo.bench.zoo_layer import measure_layer
from evo.zoo import ModelSpec
from evo.zoo.layers import decoder_layer
from evo.zoo.patch import patch, roles_of
from tests.zoo._rendered import plan_kernels

pytestmark = pytest.mark.gpu

MOE = ModelSpec("gpu-moe", hidden_size=512, intermediate_size=256, num_attention_heads=8, num_key_value_heads=2,
                head_dim=64, vocab_size=1024, num_experts=8, experts_per_token=2)
GEMMA = ModelSpec("gpu-gemma2", hidden_size=512, intermediate_size=1024, num_attention_heads=8, num_key_value_heads=4,
                  head_dim=64, vocab_size=1024, mlp="geglu", norm="gemma_rmsnorm", post_norms=True,
                  attn_logit_softcapping=50.0, query_pre_attn_scalar=64, sliding_window=64, sliding_window_pattern=2)
CONTEXT, ROOM = 48, 64  # T = 64 after 48 cached: 112 keys, past Gemma's window of 64


def _layers(spec, tokens, **kw):
    plain = decoder_layer(spec, dtype=torch.bfloat16, device="cuda", context=CONTEXT, max_tokens=ROOM, **kw)
    patched = decoder_layer(spec, dtype=torch.bfloat16, device="cuda", context=CONTEXT, max_tokens=ROOM, **kw)
    ops = plan_kernels(spec, tokens, "bf16", CONTEXT)
    return plain, patch(patched, {r: op for r, op in ops.items() if r in roles_of(patched)})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("spec, kw", [(MOE, {"experts": "grouped_mm"}),
                                      (dataclasses.replace(MOE, shared_expert_size=384, norm_topk_prob=False),
                                       {"experts": "grouped_mm"}),
                                      (GEMMA, {"layer_index": 0}), (GEMMA, {"layer_index": 1}),
                                      (GEMMA, {"layer_index": 0, "attention": "flex"})],
                         ids=["mixtral-like", "qwen-moe-like", "gemma2-sliding", "gemma2-global", "gemma2-flex"])
@pytest.mark.parametrize("tokens", [1, 64])
def test_four_ways_under_graphs(spec, kw, tokens):
    plain, patched = _layers(spec, tokens, **kw)
    row = measure_layer(plain, patched, tokens, "bf16", "cuda", rounds=3)
    assert row["failures"] == {}, row["failures"]
    assert all(row[f"{w}_{clock}ms"] > 0 for w in ("eager", "compile", "zoo_eager", "zoo_compile")
               for clock in ("", "graph_"))
    assert row["within_tolerance"], row["errors"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_eager_expert_loop_neither_compiles_nor_captures():
    plain, patched = _layers(MOE, 1, experts="loop")
    row = measure_layer(plain, patched, 1, "bf16", "cuda", rounds=3)
    assert row["eager_ms"] > 0 and row["zoo_eager_graph_ms"] > 0 and row["within_tolerance"]
    assert {"compile", "eager_graph"} <= set(row["failures"]), row["failures"]
    assert all("\n" not in why for why in row["failures"].values())
