"""Gemma 2 in the zoo (evo.zoo.gemma, evo.zoo.gemma_problems): the real Gemma-2-9B config read into its spec, what
the plan cannot serve refused in one line naming the field, and the plan's problems at decode and prefill, with and
without a context past the sliding window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import operators
from evo.experiment.config import parse_experiment
from evo.zoo import ModelError, load_model, parse_model
from evo.zoo.problems import experiments_for, layer_problems

GEMMA = Path(__file__).resolve().parents[2] / "experiments" / "models" / "gemma-2-9b.json"


def _config(**change):
    d = json.loads(GEMMA.read_text())
    for key, value in change.items():
        if value is ...:
            d.pop(key, None)
        else:
            d[key] = value
    return json.dumps(d)


def _roles(problems, tokens):
    return {p.role: p.operator for p in problems if p.tokens == tokens}


def test_the_gemma_2_9b_config():
    spec = load_model(GEMMA)
    assert (spec.name, spec.hidden_size, spec.intermediate_size, spec.head_dim, spec.vocab_size) == \
        ("gemma-2-9b", 3584, 14336, 256, 256000)
    assert (spec.num_attention_heads, spec.num_key_value_heads, spec.mlp, spec.norm, spec.post_norms) == \
        (16, 8, "geglu", "gemma_rmsnorm", True)
    assert (spec.attn_logit_softcapping, spec.final_logit_softcapping, spec.sliding_window,
            spec.sliding_window_pattern, spec.query_pre_attn_scalar) == (50.0, 30.0, 4096, 2, 256.0)
    assert spec.tie_word_embeddings
    # Gemma2Config's defaults where a config leaves a field out; null caps: none
    bare = parse_model(_config(head_dim=..., hidden_activation=..., hidden_act=..., attn_logit_softcapping=None,
                               sliding_window=None), "json")
    assert (bare.head_dim, bare.mlp, bare.attn_logit_softcapping, bare.sliding_window) == (256, "geglu", 0.0, 0)
    typed = parse_model(_config(layer_types=["sliding_attention", "full_attention"] * 21), "json")
    assert typed.sliding_window_pattern == 2


@pytest.mark.parametrize("change, field, words", [
    (dict(hidden_activation="gelu"), "hidden_activation", "tanh approximation"),
    (dict(attention_bias=True), "attention_bias", "o_proj"),
    (dict(layer_types=["full_attention", "sliding_attention"]), "layer_types", "alternation"),
    (dict(model_type="gemma3_text"), "model_type", "plans Gemma 2"),
    (dict(model_type="gemma"), "model_type", "plans Gemma 2"),
    (dict(attn_logit_softcapping=-1.0), "attn_logit_softcapping", "from 0"),
    (dict(query_pre_attn_scalar="x"), "query_pre_attn_scalar", "from 0"),
])
def test_what_the_plan_cannot_serve_is_one_line(change, field, words):
    with pytest.raises(ModelError) as e:
        parse_model(_config(**change), "json", "g.json")
    assert e.value.field == field and words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("text, field", [
    ("mlp: geglu", "mlp"), ("norm: gemma_rmsnorm", "norm"), ("attn_logit_softcapping: 50.0", "attn_logit_softcapping"),
    ("post_norms: true\nmlp: gelu", "mlp"), ("post_norms: yes please", "post_norms"),
    ("post_norms: true\nnum_experts: 8\nexperts_per_token: 2", "num_experts"),
])
def test_a_yaml_mixing_gemma_features_with_another_layer_is_refused(text, field):
    base = "hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 100\n"
    with pytest.raises(ModelError) as e:
        parse_model(base + text, "yaml", "g.yaml")
    assert e.value.field == field and "\n" not in str(e.value)


def test_decode_plan_serves_the_layer_with_linear_roles():
    spec = load_model(GEMMA)
    problems = layer_problems(spec, [1], "bf16", context=4096)
    assert _roles(problems, 1) == {
        "linear_qkv": "linear+rmsnorm", "rope": "rope_cache", "attention": "attention+causal+softcap50",
        "attention_local": "attention+causal+softcap50+window4096", "cache_attention": "cache_attention+softcap50",
        "linear_o_proj": "linear", "post_norm": "rmsnorm", "linear_gate_up": "linear+rmsnorm+geglu",
        "linear_down": "linear", "linear_lm_head": "linear+rmsnorm", "sampling_softmax": "softmax"}
    by_role = {p.role: p for p in problems}
    # a decode step over a static cache: one capped op for every layer, the window being the sliding layers' mask
    assert by_role["attention_local"].sizes == by_role["cache_attention"].sizes == (1, 16, 8, 1, 4097, 256)
    assert by_role["linear_gate_up"].sizes == (1, 14336, 3584) and by_role["post_norm"].uses == 2
    notes = " ".join(p.note for p in problems)
    assert "window is in their mask" in notes and "1 + weight" in notes and "30 * tanh(logits / 30)" in notes
    for p in problems:  # every planned problem is one its operator takes
        if p.operator:
            operators.get(p.operator).problem(p.sizes, p.dtype)


def test_prefill_plan_and_a_window_that_covers_every_key():
    spec = load_model(GEMMA)
    problems = layer_problems(spec, [2048], "bf16", context=0)
    roles = _roles(problems, 2048)
    assert roles["attention"] == "attention+causal+softcap50" and "attention_local" not in roles
    assert roles["gate_up"] == "gemm+geglu" and roles["add_norm"] == "rmsnorm+residual" and roles["o_proj"] == "gemm"
    # GeGLU in the GEMM's epilogue, as a Llama layer plans gemm+swiglu: N is the gated width, B = [gate | up]
    assert {p.role: p.sizes for p in problems}["gate_up"] == (2048, 14336, 3584)
    notes = [p.note for p in problems if p.note]
    assert not any("GeGLU in torch" in n for n in notes) and any("covers every key" in n for n in notes)
    for p in problems:  # every planned problem is one its operator takes
        if p.operator:
            operators.get(p.operator).problem(p.sizes, p.dtype)


@pytest.mark.parametrize("mlp", ["geglu", "swiglu"])
def test_the_gate_up_of_a_gemma_style_layer_is_one_gated_gemm_above_16_tokens(mlp):
    """A Gemma-style YAML layer (post_norms) plans gate_up as gemm+<its gate> at T > 16 and linear+rmsnorm+<its gate>
    below, as a Llama layer plans gemm+swiglu: one GEMM on B = [gate | up], the gate in its epilogue."""
    spec = parse_model("hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 100\n"
                       f"post_norms: true\nmlp: {mlp}\n", "yaml", "g.yaml")
    problems = layer_problems(spec, [1, 64], "fp16", context=0)
    by = {(p.role, p.tokens): p for p in problems}
    assert (by["gate_up", 64].operator, by["gate_up", 64].sizes) == (f"gemm+{mlp}", (64, 128, 64))
    assert by["linear_gate_up", 1].operator == f"linear+rmsnorm+{mlp}"
    op = operators.get(f"gemm+{mlp}")
    shapes = op.tensor_shapes(op.problem(by["gate_up", 64].sizes, "fp16"))
    assert shapes == [(64, 64), (64, 256), (64, 128)]  # A, B = [gate | up], the gated output


def test_experiments_parse_and_name_the_variants(tmp_path):
    texts = experiments_for(load_model(GEMMA), [1, 16, 2048], "bf16", context=4096, output=str(tmp_path))
    assert {"attention+causal+softcap50", "attention+causal+softcap50+window4096", "linear+rmsnorm+geglu",
            "gemm+geglu"} <= set(texts)
    for op, text in texts.items():
        assert parse_experiment(text, f"{op}.yaml").operator == op
    assert "cache_attention+softcap50" in texts  # the decode steps over the 4096-token context


def test_the_reference_layer_refuses_a_gemma_layer_in_one_line():
    from evo.zoo.layer import DecoderLayer

    with pytest.raises(ValueError, match="Gemma-2 layer") as e:
        DecoderLayer(load_model(GEMMA))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("cap, window", [(50.0, 0), (50.0, 4096), (30.5, 0), (0.0, 1024), (0.001, 7)])
def test_the_zoo_spells_attention_variants_as_the_operator_does(cap, window):
    from evo.zoo.gemma_problems import attention_name
    from operators.attention.names import variant_name

    name = attention_name(cap, window)
    assert name == variant_name(True, cap, window) == operators.get(name).name


@pytest.mark.parametrize("cap", [50.0, 30.5, 0.0, 0.001])
def test_the_zoo_spells_cache_attention_variants_as_the_operator_does(cap):
    from evo.zoo.gemma_problems import cache_attention_name

    name = cache_attention_name(cap)
    assert name == operators.get(name).name and operators.get(name).softcap == cap


def test_a_decode_plan_without_a_cap_plans_plain_cache_attention():
    spec = load_model(GEMMA)
    uncapped = parse_model(_config(attn_logit_softcapping=None), "json", "g.json")
    assert spec.attn_logit_softcapping == 50.0 and uncapped.attn_logit_softcapping == 0.0
    roles = _roles(layer_problems(uncapped, [4], "bf16", context=100), 4)
    assert roles["cache_attention"] == "cache_attention" and roles["attention"] == "attention+causal"
    assert "cache_attention" not in _roles(layer_problems(spec, [4], "bf16", context=0), 4)  # no cache: no role
