"""The decode roles on a GPU (evo.zoo.patch: the linear roles with norms fused, rope_cache writing the KV cache,
cache_attention reading it): a layer patched with seed kernels of linear+rmsnorm, linear+residual,
linear+rmsnorm+swiglu, rope_cache and cache_attention matches the plain layer at T = 1 and 16, eager, under
torch.compile (fullgraph) and under a CUDA graph; the decode loop (evo.bench.zoo_decode) runs them four ways with one
graph for every step. Run on the GPU machine:
    python3 -m pytest tests/gpu/test_zoo_decode_roles_gpu.py -q
(a minute or two: a small Llama-like layer, torch.compile of each way)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

import operators
from evo.api import as_torch_op
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from evo.zoo import ModelSpec, layer_problems
from evo.zoo.layer import DecoderLayer
from evo.zoo.patch import patch, roles_of

pytestmark = pytest.mark.gpu

SPEC = ModelSpec("small-llama", hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                 num_key_value_heads=4, head_dim=64, vocab_size=1000, rms_norm_eps=1e-5)
CONTEXT, ROOM = 512, 16


def _kernel(name: str, sizes: tuple[int, ...]):
    op = operators.get(name)
    problem = op.problem(sizes, "bf16")
    genome = op.family.repair(op.family.seeds(problem, HOPPER)[0], problem, HOPPER, np.random.default_rng(0))
    source = op.render(genome, problem, HOPPER)
    return as_torch_op(getattr(load_source(source), op.entry), op, tag=hashlib.sha256(source.encode()).hexdigest()[:16])


def _layers(tokens: int):
    plain = DecoderLayer(SPEC, device="cuda", context=CONTEXT, max_tokens=ROOM, init_std=0.05)
    layer = DecoderLayer(SPEC, device="cuda", context=CONTEXT, max_tokens=ROOM, init_std=0.05)
    plan = [p for p in layer_problems(SPEC, [tokens, ROOM], "bf16", CONTEXT) if p.tokens == tokens
            and p.searchable and p.scope == "layer" and p.operator != "attention+causal"]
    ops = {p.role: _kernel(p.operator, p.sizes) for p in plan}
    assert set(ops) == {"linear_qkv", "rope", "cache_attention", "linear_o_proj", "linear_gate_up", "linear_down"}
    assert set(ops) <= set(roles_of(layer))
    return plain, patch(layer, ops)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("tokens", [1, 16])
def test_the_patched_layer_runs_eager_compiled_and_in_a_graph(tokens):
    plain, layer = _layers(tokens)
    x = torch.randn(tokens, SPEC.hidden_size, device="cuda", generator=torch.Generator("cuda").manual_seed(tokens))
    x = x.to(torch.bfloat16)
    with torch.no_grad():
        ref = plain(x)
        assert _rel(layer(x), ref) < 1.5e-2
        assert _rel(layer.kv_cache, plain.kv_cache) < 1.5e-2
        compiled = torch.compile(layer, mode="max-autotune-no-cudagraphs", fullgraph=True, dynamic=False)
        assert _rel(compiled(x), ref) < 1.5e-2
        graph = torch.cuda.CUDAGraph()
        static_x = x.clone()
        compiled(static_x)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph):
            out = compiled(static_x)
        layer.kv_cache[:, :, :, CONTEXT:].zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert _rel(out, ref) < 1.5e-2 and _rel(layer.kv_cache, plain.kv_cache) < 1.5e-2  # the graph wrote the cache


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_decode_loop_runs_the_decode_roles_under_one_graph():
    from evo.bench.zoo_decode import measure_decode

    plain, layer = _layers(1)
    d = measure_decode(plain, layer, steps=16, dtype="bf16", device="cuda", tolerance=1.5e-2)
    assert d["failures"] == {}, d["failures"]
    for way in ("eager", "compile", "zoo_eager", "zoo_compile"):
        assert d[f"{way}_ms"] > 0 and d[f"{way}_graph_ms"] > 0
    assert d["within_tolerance"], d["errors"]
