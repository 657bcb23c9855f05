"""evo.zoo.layer_fp8: the reference Llama-style layer with FP8 weights (e4m3 per output channel, activations per token
at run time): the bf16 layer of its seed quantized, its roles patched (evo.zoo.patch) with ops of the fp8_gemm+channel
call, the decode loop through it, and the kinds it refuses in one line."""

from __future__ import annotations

import pytest
import torch

from evo.zoo.decode import DecodeState, decode_step
from evo.zoo.fp8_linear import FP8Linear, fp8_matmul, quantize_rows
from evo.zoo.layer import DecoderLayer
from evo.zoo.layer_fp8 import FP8DecoderLayer
from evo.zoo.layers import decoder_layer
from evo.zoo.patch import patch, roles_of, unpatch
from tests.zoo._layer_cases import GELU, LLAMA, QWEN2, SPECS, TINY, TINY_GEMMA2, TINY_MOE, hidden_states


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_the_fp8_layer_is_its_bf16_layer_quantized(spec):
    kwargs = dict(dtype=torch.float32, init_std=0.2, context=5, max_tokens=3)
    dense = DecoderLayer(spec, **kwargs)
    fp8 = FP8DecoderLayer(spec, torch_way="dequantize", **kwargs)
    linears = fp8.fp8_linears()
    assert set(linears) == {"fp8_qkv", "fp8_o_proj", "fp8_down", "fp8_gate_up" if spec.mlp == "swiglu" else "fp8_up"}
    dense_weights = {"fp8_qkv": dense.qkv_proj, "fp8_o_proj": dense.o_proj, "fp8_down": dense.down_proj,
                     "fp8_gate_up": getattr(dense, "gate_up_proj", None), "fp8_up": getattr(dense, "up_proj", None)}
    for role, linear in linears.items():
        q, scale = quantize_rows(dense_weights[role].weight)
        assert isinstance(linear, FP8Linear) and torch.equal(linear.weight.view(torch.uint8), q.view(torch.uint8))
        assert torch.equal(linear.weight_scale, scale)
        assert (linear.bias is None) == (dense_weights[role].bias is None)
    assert fp8.input_norm.weight.dtype == torch.float32 and torch.equal(fp8.kv_cache, dense.kv_cache)
    x = hidden_states(spec, 3)
    with torch.no_grad():
        y, ref = fp8(x), dense(x)
    assert 1e-3 < _rel(y, ref) < 0.15  # FP8's own error at init_std 0.2 (MLP-dominated outputs): a few percent
    scaled = FP8DecoderLayer(spec, torch_way="scaled_mm", **kwargs)
    with torch.no_grad():
        assert _rel(scaled(x), y) < 1e-2  # the same FP8 products in another order


def _fp8_op(calls: list[str], role: str, wrong: bool = False):
    """An op with fp8_gemm+channel's call, in plain torch (the interpreter's kernels: tests/surface/test_zoo_fp8.py)."""

    def op(x_q, w_q, x_scale, w_scale, dtype):
        calls.append(role)
        return fp8_matmul(x_q, x_scale, w_q, torch.ones_like(w_scale) if wrong else w_scale, dtype, "dequantize")

    return op


def test_patched_fp8_roles_run_their_ops_and_a_wrong_op_shows():
    kwargs = dict(dtype=torch.float32, init_std=0.2, context=4, max_tokens=3)
    plain = FP8DecoderLayer(QWEN2, torch_way="dequantize", **kwargs)  # QKV biases: added after the op, in torch
    layer = FP8DecoderLayer(QWEN2, torch_way="dequantize", **kwargs)
    assert roles_of(layer) == ("norm", "fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down", "rope", "cache_attention",
                               "attention")
    calls: list[str] = []
    fp8_roles = ("fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down")
    patch(layer, {r: _fp8_op(calls, r) for r in fp8_roles})
    x = hidden_states(QWEN2, 3)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), plain(x), rtol=1e-5, atol=1e-5)
    assert calls == list(fp8_roles)
    patch(layer, {"fp8_down": _fp8_op(calls, "fp8_down", wrong=True)})
    with torch.no_grad():
        assert _rel(layer(x), plain(x)) > 0.05
    with pytest.raises(ValueError, match="has no role 'gate_up'"):
        patch(layer, {"gate_up": _fp8_op(calls, "gate_up")})
    unpatch(layer)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), plain(x), rtol=0, atol=0)


def test_a_gelu_layer_has_fp8_up():
    layer = FP8DecoderLayer(GELU, dtype=torch.float32, init_std=0.2)
    calls: list[str] = []
    plain = FP8DecoderLayer(GELU, dtype=torch.float32, init_std=0.2, torch_way="dequantize")
    patch(layer, {"fp8_up": _fp8_op(calls, "fp8_up")})
    x = hidden_states(GELU, 2)
    with torch.no_grad():
        assert _rel(layer(x), plain(x)) < 1e-2 and calls == ["fp8_up"]


def test_the_decode_loop_runs_the_fp8_layer():
    context, tokens = 6, 2
    layer = FP8DecoderLayer(LLAMA, dtype=torch.float32, context=context, max_tokens=tokens, torch_way="dequantize")
    calls: list[str] = []
    patch(layer, {r: _fp8_op(calls, r) for r in ("fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down")})
    state = DecodeState.for_layer(layer, capacity=context + 4)
    x = hidden_states(LLAMA, tokens)
    y = decode_step(layer, x, state.cache, state.length)
    with torch.no_grad():
        torch.testing.assert_close(y, layer(x), rtol=1e-5, atol=1e-5)
    assert len(calls) == 8  # four projections a step, the step and the layer


@pytest.mark.parametrize("spec,words", [(TINY_MOE, "is a Mixture-of-Experts model"),
                                        (TINY_GEMMA2, "the FP8 plan serves Llama-style layers only")])
def test_kinds_the_fp8_plan_does_not_serve_are_one_line(spec, words):
    with pytest.raises(ValueError, match=words) as e:
        decoder_layer(spec, weights="fp8", dtype=torch.float32)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="weights must be one of bf16, fp8; got 'int4'"):
        decoder_layer(TINY, weights="int4")
    assert isinstance(decoder_layer(TINY, weights="fp8", torch_way="dequantize"), FP8DecoderLayer)


def test_the_floor_counts_one_byte_a_weight():
    from evo.bench.zoo_floor import layer_floor

    dense = layer_floor(DecoderLayer(TINY, dtype=torch.bfloat16), 4, None)
    fp8 = layer_floor(FP8DecoderLayer(TINY, dtype=torch.bfloat16), 4, None)
    projections = sum(w.numel() for w in FP8DecoderLayer(TINY).fp8_linears().values() for w in [w.weight])
    scales = sum(linear.out_features for linear in FP8DecoderLayer(TINY).fp8_linears().values())
    assert dense["weights_bytes"] - fp8["weights_bytes"] == projections - 4 * scales
    assert dense["flops"] == fp8["flops"]
