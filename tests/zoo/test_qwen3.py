"""Qwen3's per-head q and k norms (ModelSpec.qk_norm): read from a qwen3 config, planned around (rope_cache, which
rotates the projection's own output, leaves RoPE to torch there), refused in one line by evo's reference layers (the
layer bench would time another model). patch_model serves a transformers Qwen3: tests/zoo/test_hf_patch*.py and
test_hf_fp8.py run the qwen3 family beside the others."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evo.zoo import layer_problems
from evo.zoo.layers import decoder_layer
from evo.zoo.model import parse_model

MODELS = Path(__file__).resolve().parents[2] / "experiments" / "models"
LLAMA = json.loads((MODELS / "llama-3-8b.json").read_text())
QWEN3 = {**LLAMA, "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}


def test_a_qwen3_config_has_qk_norms():
    assert parse_model(json.dumps(QWEN3), "json", "q.json", "q").qk_norm
    assert not parse_model(json.dumps(LLAMA), "json", "l.json", "l").qk_norm
    yaml = "hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\nqk_norm: true\n"
    assert parse_model(yaml, "yaml").qk_norm


def test_the_plan_leaves_rope_to_torch_and_the_reference_layer_refuses():
    spec = parse_model(json.dumps(QWEN3), "json", "q.json", "qwen3-8b")
    rope = [p for p in layer_problems(spec, [1, 16], "bf16", context=100) if p.role == "rope"]
    assert rope and all(p.operator is None and "qk_norm" in p.note for p in rope)
    plain = parse_model(json.dumps(LLAMA), "json", "l.json", "l")
    assert all(p.operator == "rope_cache" for p in layer_problems(plain, [1], "bf16", context=100) if p.role == "rope")
    with pytest.raises(ValueError, match=r"qwen3-8b: Qwen3's per-head q and k norms \(qk_norm\)") as e:
        decoder_layer(spec)
    assert "\n" not in str(e.value)
