"""Qwen3's per-head q and k norms (ModelSpec.qk_norm): read from a qwen3 config; evo's reference layer with them
computes transformers' Qwen3DecoderLayer (same weights; without the norms it would not), in a prefill, over a KV
cache and in the decode loop's step; the plan and the patch leave RoPE to torch there (rope_cache rotates the
projection's own output). patch_model serves a transformers Qwen3: tests/zoo/test_hf_patch*.py and test_hf_fp8.py
run the qwen3 family beside the others."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from evo.zoo import layer_problems
from evo.zoo.decode import DecodeState, decode_step
from evo.zoo.layer import DecoderLayer
from evo.zoo.model import parse_model
from evo.zoo.patch import patch
from tests.zoo._layer_cases import TINY, hidden_states

MODELS = Path(__file__).resolve().parents[2] / "experiments" / "models"
LLAMA = json.loads((MODELS / "llama-3-8b.json").read_text())
QWEN3 = {**LLAMA, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}
SPEC = replace(TINY, name="tiny-qwen3", qk_norm=True)


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).norm() / ref.double().norm())


def test_a_qwen3_config_has_qk_norms():
    assert parse_model(json.dumps(QWEN3), "json", "q.json", "q").qk_norm
    small = {k: v for k, v in QWEN3.items() if k != "head_dim"} | {"hidden_size": 64, "num_attention_heads": 8}
    assert parse_model(json.dumps(small), "json", "q.json", "q").head_dim == 128  # Qwen3Config's default, as loaded
    assert not parse_model(json.dumps(LLAMA), "json", "l.json", "l").qk_norm
    yaml = "hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\nqk_norm: true\n"
    assert parse_model(yaml, "yaml").qk_norm


def _hf_layer(layer: DecoderLayer) -> torch.nn.Module:
    """transformers' Qwen3DecoderLayer of the tiny spec (eager attention) holding `layer`'s weights."""
    tf = pytest.importorskip("transformers")
    from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

    s = layer.spec
    config = tf.Qwen3Config(hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                            num_attention_heads=s.num_attention_heads, num_key_value_heads=s.num_key_value_heads,
                            head_dim=s.head_dim, vocab_size=s.vocab_size, num_hidden_layers=1,
                            rms_norm_eps=s.rms_norm_eps, attn_implementation="eager")
    hf = Qwen3DecoderLayer(config, layer_idx=0).eval()
    q, k, v = layer.qkv_proj.weight.split([s.q_size, s.kv_size, s.kv_size])
    gate, up = layer.gate_up_proj.weight.chunk(2)
    weights = {"self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
               "self_attn.o_proj.weight": layer.o_proj.weight, "self_attn.q_norm.weight": layer.q_norm.weight,
               "self_attn.k_norm.weight": layer.k_norm.weight, "mlp.gate_proj.weight": gate,
               "mlp.up_proj.weight": up, "mlp.down_proj.weight": layer.down_proj.weight,
               "input_layernorm.weight": layer.input_norm.weight,
               "post_attention_layernorm.weight": layer.post_attention_norm.weight}
    assert set(weights) == {name for name, _ in hf.named_parameters()}
    hf.load_state_dict(weights)
    return hf


def test_the_reference_layer_is_transformers_qwen3_layer():
    layer = DecoderLayer(SPEC, dtype=torch.float32, init_std=0.2)
    hf = _hf_layer(layer)
    t = 7
    x = hidden_states(SPEC, t)
    cos, sin = layer.rope(t)
    mask = torch.zeros(t, t).masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min)
    with torch.no_grad():
        theirs = hf(x[None], position_embeddings=(cos[None], sin[None]), attention_mask=mask[None, None])[0]
        assert _rel(layer(x), theirs) < 1e-5
        plain = DecoderLayer(replace(SPEC, qk_norm=False), dtype=torch.float32, init_std=0.2)
        plain.load_state_dict({k: v for k, v in layer.state_dict().items() if "q_norm" not in k and "k_norm" not in k})
        assert _rel(plain(x), theirs) > 1e-3  # the same weights without the norms: another model


def test_the_decode_step_and_the_cached_forward_norm_alike():
    layer = DecoderLayer(SPEC, dtype=torch.float32, init_std=0.2, context=5, max_tokens=2)
    x = hidden_states(SPEC, 2)
    with torch.no_grad():
        ref = layer(x)
        state = DecodeState.for_layer(layer, 5 + 4)
        assert _rel(decode_step(layer, x, state.cache, state.length), ref) < 1e-5


def test_the_plan_and_the_patch_leave_rope_to_torch():
    spec = parse_model(json.dumps(QWEN3), "json", "q.json", "qwen3-8b")
    rope = [p for p in layer_problems(spec, [1, 16], "bf16", context=100) if p.role == "rope"]
    assert rope and all(p.operator is None and "qk_norm" in p.note for p in rope)
    plain = parse_model(json.dumps(LLAMA), "json", "l.json", "l")
    assert all(p.operator == "rope_cache" for p in layer_problems(plain, [1], "bf16", context=100) if p.role == "rope")
    layer = DecoderLayer(SPEC, dtype=torch.float32, context=4, max_tokens=2)
    with pytest.raises(ValueError, match=r"cannot take role 'rope': its q and k are normed per head"):
        patch(layer, {"rope": lambda *a: None})
