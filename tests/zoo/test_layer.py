"""The reference decoder layer (evo.zoo.layer): its parts and shapes per model kind, seeded weights, the causal
property, GQA against a hand loop, RoPE, the MLPs' math, the head, and its refusals."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from evo.zoo.layer import DecoderLayer, LMHead, apply_rope
from tests.zoo._layer_cases import GELU, GELU_TANH, LLAMA, QWEN2, SPECS, TINY, hidden_states


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_parts_and_shapes(spec):
    layer = DecoderLayer(spec)
    h, inter = spec.hidden_size, spec.intermediate_size
    assert layer.qkv_proj.weight.shape == (spec.q_size + 2 * spec.kv_size, h)
    assert (layer.qkv_proj.bias is not None) == spec.attention_bias
    assert layer.o_proj.weight.shape == (h, spec.q_size) and layer.o_proj.bias is None
    if spec.mlp == "swiglu":
        assert layer.gate_up_proj.weight.shape == (2 * inter, h) and layer.gate_up_proj.bias is None
        assert not hasattr(layer, "up_proj")
    else:
        assert layer.up_proj.weight.shape == (inter, h) and not hasattr(layer, "gate_up_proj")
        assert (layer.up_proj.bias is not None) == spec.mlp_bias
    assert layer.down_proj.weight.shape == (h, inter) and (layer.down_proj.bias is not None) == spec.mlp_bias
    assert {p.dtype for p in layer.parameters()} == {torch.bfloat16}
    assert layer.inv_freq.dtype == torch.float32  # RoPE's frequencies stay fp32 in a bf16 layer
    for tokens in (1, 7):
        y = layer(hidden_states(spec, tokens, torch.bfloat16))
        assert y.shape == (tokens, h) and y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    logits = LMHead(spec)(hidden_states(spec, 3, torch.bfloat16))
    assert logits.shape == (3, spec.vocab_size) and torch.isfinite(logits).all()


def test_weights_are_seeded():
    a, b, c = DecoderLayer(TINY, seed=0), DecoderLayer(TINY, seed=0), DecoderLayer(TINY, seed=1)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pb) and not torch.equal(pa, pc), name
    w = DecoderLayer(QWEN2, dtype=torch.float32)
    assert 0.015 < float(w.qkv_proj.weight.std()) < 0.025 and 0.015 < float(w.qkv_proj.bias.std()) < 0.03
    norm = w.input_norm.weight
    assert 0.9 < float(norm.min()) and float(norm.max()) < 1.1 and not torch.equal(norm, torch.ones_like(norm))


@pytest.mark.parametrize("spec", [TINY, QWEN2, GELU], ids=lambda s: s.name)
def test_a_token_sees_only_itself_and_earlier_tokens(spec):
    layer = DecoderLayer(spec, dtype=torch.float32)
    x = hidden_states(spec, 9)
    changed = x.clone()
    changed[5:] = hidden_states(spec, 4, seed=2)
    y, y2 = layer(x), layer(changed)
    assert torch.allclose(y[:5], y2[:5], rtol=0, atol=1e-6)
    assert not torch.allclose(y[5:], y2[5:], atol=1e-3)
    earlier = x.clone()
    earlier[0] += 1.0  # and a change to an earlier token reaches every later one
    assert (layer(earlier) - y).abs().amax(dim=1).min() > 1e-4


def test_gqa_attention_matches_a_hand_loop():
    spec = LLAMA  # 6 query heads over 2 kv heads: heads 0-2 read kv head 0, heads 3-5 kv head 1
    layer = DecoderLayer(spec, dtype=torch.float32)
    t, d, group = 5, spec.head_dim, spec.num_attention_heads // spec.num_key_value_heads
    qkv = torch.randn(t, spec.q_size + 2 * spec.kv_size, generator=torch.Generator().manual_seed(3))
    q, k, v = qkv.split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)
    cos, sin = layer.rope(t)
    expected = torch.empty(t, spec.q_size)
    for head in range(spec.num_attention_heads):
        kv = head // group
        qh = apply_rope(q[:, head * d:(head + 1) * d], cos, sin)
        kh = apply_rope(k[:, kv * d:(kv + 1) * d], cos, sin)
        vh = v[:, kv * d:(kv + 1) * d]
        for i in range(t):
            scores = torch.stack([qh[i] @ kh[j] for j in range(i + 1)]) / math.sqrt(d)
            expected[i, head * d:(head + 1) * d] = torch.softmax(scores, dim=0) @ vh[:i + 1]
    assert torch.allclose(layer.attention(qkv), expected, atol=1e-5)


def test_rope_rotates_by_position():
    layer = DecoderLayer(TINY, dtype=torch.float32)
    d = TINY.head_dim
    cos, sin = layer.rope(12)
    assert torch.equal(cos[0], torch.ones(d)) and torch.equal(sin[0], torch.zeros(d))  # position 0 is unrotated
    q, k = torch.randn(2, d, generator=torch.Generator().manual_seed(4))
    qs, ks = apply_rope(q.expand(12, d), cos, sin), apply_rope(k.expand(12, d), cos, sin)
    # a rotation: norms are kept, and q_m . k_n depends on m - n only
    assert torch.allclose(qs.norm(dim=1), q.norm().expand(12), atol=1e-5)
    assert math.isclose(float(qs[7] @ ks[3]), float(qs[4] @ ks[0]), abs_tol=1e-5)
    assert not math.isclose(float(qs[7] @ ks[3]), float(qs[3] @ ks[0]), abs_tol=1e-3)


@pytest.mark.parametrize("spec", [TINY, GELU, GELU_TANH], ids=lambda s: s.name)
def test_the_mlp_is_the_spec_s(spec):
    layer = DecoderLayer(spec, dtype=torch.float32)
    x, r = hidden_states(spec, 4), hidden_states(spec, 4, seed=5)
    inter = spec.intermediate_size
    if spec.mlp == "swiglu":  # the weight's first `inter` rows are the gate's
        w = layer.gate_up_proj.weight
        hidden = F.silu(x @ w[:inter].t()) * (x @ w[inter:].t())
    else:
        pre = x @ layer.up_proj.weight.t() + (0 if layer.up_proj.bias is None else layer.up_proj.bias)
        hidden = 0.5 * pre * (1 + torch.erf(pre / math.sqrt(2))) if spec.mlp == "gelu" else \
            0.5 * pre * (1 + torch.tanh(math.sqrt(2 / math.pi) * (pre + 0.044715 * pre ** 3)))
    down = hidden @ layer.down_proj.weight.t() + (0 if layer.down_proj.bias is None else layer.down_proj.bias)
    assert torch.allclose(layer.mlp(x, r), down + r, atol=1e-6)


def test_norm_uses_the_given_eps():
    x = hidden_states(TINY, 3) * 1e-3  # small enough that eps matters
    a, b = DecoderLayer(TINY, dtype=torch.float32), DecoderLayer(TINY, dtype=torch.float32, eps=1e-5)
    assert a.input_norm.eps == 1e-6 and b.post_attention_norm.eps == 1e-5
    xf = x.double()
    expected = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * b.input_norm.weight.double()
    assert torch.allclose(b.input_norm(x).double(), expected, rtol=1e-5)
    assert not torch.allclose(a.input_norm(x), b.input_norm(x), rtol=1e-3)
    # without eps= the spec's rms_norm_eps (and rope_theta) hold, in the layer and in the head
    spec = dataclasses.replace(TINY, rms_norm_eps=1e-5, rope_theta=5e5)
    c = DecoderLayer(spec, dtype=torch.float32)
    assert c.input_norm.eps == c.post_attention_norm.eps == LMHead(spec).norm.eps == 1e-5
    assert torch.allclose(c.inv_freq, 5e5 ** -(torch.arange(0, 16, 2, dtype=torch.float32) / 16))


def test_refusals():
    with pytest.raises(ValueError, match="head_dim 7 is odd"):
        DecoderLayer(dataclasses.replace(TINY, head_dim=7))
    layer, head = DecoderLayer(TINY), LMHead(TINY)
    for bad in (torch.zeros(3, 32), torch.zeros(1, 3, 64)):
        with pytest.raises(ValueError, match=r"expected x of shape \[T, 64\]"):
            layer(bad.bfloat16())
        with pytest.raises(ValueError, match=r"expected x of shape \[T, 64\]"):
            head(bad.bfloat16())


@pytest.mark.parametrize("t", [1, 4])
def test_attention_over_a_kv_cache_matches_a_hand_loop(t):
    """The new tokens sit at positions context..context+t-1, see every cached key and the new ones up to their own."""
    spec, context = LLAMA, 7
    layer = DecoderLayer(spec, dtype=torch.float32, context=context)
    d, group = spec.head_dim, spec.num_attention_heads // spec.num_key_value_heads
    qkv = torch.randn(t, spec.q_size + 2 * spec.kv_size, generator=torch.Generator().manual_seed(4))
    q, k, v = qkv.split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)
    cos, sin = layer.rope(t)
    pos = torch.arange(context, context + t, dtype=torch.float32)
    assert torch.allclose(cos[:, 0], torch.cos(pos * layer.inv_freq[0]))  # rotated at their own positions
    expected = torch.empty(t, spec.q_size)
    for head in range(spec.num_attention_heads):
        kv = head // group
        qh = apply_rope(q[:, head * d:(head + 1) * d], cos, sin)
        kh = torch.cat((layer.k_cache[0, kv], apply_rope(k[:, kv * d:(kv + 1) * d], cos, sin)))
        vh = torch.cat((layer.v_cache[0, kv], v[:, kv * d:(kv + 1) * d]))
        for i in range(t):
            seen = context + i + 1
            scores = torch.stack([qh[i] @ kh[j] for j in range(seen)]) / math.sqrt(d)
            expected[i, head * d:(head + 1) * d] = torch.softmax(scores, dim=0) @ vh[:seen]
    assert torch.allclose(layer.attention(qkv), expected, atol=1e-5)
    assert layer.k_cache.abs().mean() > 0.5  # keys of unit scale: the cache weighs in the softmax
    with pytest.raises(ValueError, match="context"):
        DecoderLayer(spec, context=-1)


def test_the_layer_with_a_kv_cache_compiles_whole_after_an_eager_call():
    """Several new tokens over a cache use torch's lower-right causal bias, which torch.compile cannot construct
    inside a graph (a GPU run failed so at 2048 tokens): the layer keeps the one its eager call made."""
    layer = DecoderLayer(TINY, dtype=torch.float32, context=5)
    x = torch.randn(3, TINY.hidden_size, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        eager = layer(x)
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True, dynamic=False)(x)
    assert torch.allclose(compiled, eager, atol=1e-5)


def test_new_keys_are_written_into_the_cache_in_place_and_each_call_sees_the_same_problem():
    """As serving code's static caches: the new tokens' keys and values land after the context, in the one buffer
    (no concatenation of the whole cache per call); a second call writes the same positions, so it computes what
    a fresh layer computes; more new tokens than the cache has room for is one clear error."""
    layer, fresh = (DecoderLayer(TINY, dtype=torch.float32, context=6, max_tokens=4) for _ in range(2))
    gen = torch.Generator().manual_seed(5)
    x1, x2 = torch.randn(3, TINY.hidden_size, generator=gen), torch.randn(3, TINY.hidden_size, generator=gen)
    buffer = layer.kv_cache.data_ptr()
    with torch.no_grad():
        layer(x1)
        assert layer.kv_cache.data_ptr() == buffer and layer.kv_cache[:, :, :, 6:9].abs().sum() > 0
        assert layer.kv_cache[:, :, :, 9:].abs().sum() == 0 and torch.equal(layer.k_cache, fresh.k_cache)
        assert torch.allclose(layer(x2), fresh(x2), atol=1e-6)
        with pytest.raises(ValueError, match="room for 4"):
            layer(torch.zeros(5, TINY.hidden_size))
    with pytest.raises(ValueError, match="max_tokens"):
        DecoderLayer(TINY, max_tokens=0)


def test_a_moe_spec_is_refused_in_one_line():
    from pathlib import Path

    from evo.zoo import load_model

    spec = load_model(Path(__file__).resolve().parents[2] / "experiments" / "models" / "mixtral-8x7b.json")
    with pytest.raises(ValueError, match=r"a Mixture-of-Experts MLP \(8 experts, top-2\): build it with "
                                         r"evo.zoo.layer_moe.MoEDecoderLayer"):
        DecoderLayer(spec)
