"""ModelSpec from both formats, and every refusal as one ModelError line naming the file and the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from evo.zoo.model import _YAML_KEYS, ModelError, ModelSpec, load_model, parse_model

MODELS = Path(__file__).resolve().parents[2] / "experiments" / "models"
LLAMA = json.loads((MODELS / "llama-3-8b.json").read_text())


def test_shipped_models():
    llama = load_model(MODELS / "llama-3-8b.json")
    assert llama == ModelSpec("llama-3-8b", 4096, 14336, 32, 8, 128, 128256, "rmsnorm", "swiglu", False, False, False,
                              rms_norm_eps=1e-5, rope_theta=500000.0)
    qwen = load_model(MODELS / "qwen2-7b.json")
    assert (qwen.hidden_size, qwen.intermediate_size, qwen.num_key_value_heads, qwen.head_dim) == (3584, 18944, 4, 128)
    assert qwen.attention_bias and not qwen.mlp_bias and not qwen.tie_word_embeddings  # Qwen2's implicit QKV bias
    assert (qwen.rms_norm_eps, qwen.rope_theta) == (1e-6, 1e6)
    mistral = load_model(MODELS / "mistral-7b.json")
    assert (mistral.vocab_size, mistral.num_key_value_heads, mistral.attention_bias) == (32000, 8, False)
    assert load_model(MODELS / "tiny.yaml").rms_norm_eps == 1e-6  # the defaults when a file says nothing
    tiny = load_model(MODELS / "tiny.yaml")
    assert (tiny.name, tiny.hidden_size, tiny.head_dim, tiny.num_key_value_heads, tiny.vocab_size) == \
        ("tiny", 64, 16, 2, 256)


def test_yaml_keys_are_the_fields():
    assert _YAML_KEYS == tuple(f.name for f in dataclasses.fields(ModelSpec))


def test_hf_defaults_and_activations():
    base = {"hidden_size": 512, "intermediate_size": 2048, "num_attention_heads": 8, "vocab_size": 1000}
    spec = parse_model(json.dumps(base), "json", "m.json", "m")
    assert (spec.num_key_value_heads, spec.head_dim, spec.mlp, spec.tie_word_embeddings) == (8, 64, "swiglu", True)
    for act, mlp in [("gelu", "gelu"), ("gelu_new", "gelu_tanh"), ("gelu_pytorch_tanh", "gelu_tanh"),
                     ("silu", "swiglu")]:
        assert parse_model(json.dumps({**base, "hidden_act": act}), "json").mlp == mlp
    assert parse_model(json.dumps({**base, "model_type": "qwen2"}), "json").attention_bias
    assert not parse_model(json.dumps({**base, "model_type": "qwen2", "attention_bias": False}), "json").attention_bias
    assert parse_model(json.dumps({**base, "mlp_bias": True, "head_dim": None, "hidden_act": "gelu"}), "json").mlp_bias


_TINY = "hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\n"


def test_moe_models():
    mixtral = load_model(MODELS / "mixtral-8x7b.json")
    assert (mixtral.num_experts, mixtral.experts_per_token, mixtral.intermediate_size, mixtral.shared_expert_size) == \
        (8, 2, 14336, 0)
    qwen = load_model(MODELS / "qwen1.5-moe-a2.7b.json")  # each expert moe_intermediate_size wide, a shared expert
    assert (qwen.num_experts, qwen.experts_per_token, qwen.intermediate_size, qwen.shared_expert_size) == \
        (60, 4, 1408, 5632)
    assert qwen.mlp == "swiglu" and qwen.attention_bias  # Qwen2-MoE's qkv_bias, True unless its config says not
    tiny = parse_model(_TINY + "num_experts: 4\nexperts_per_token: 1\n", "yaml", "m.yaml", "m")
    assert (tiny.num_experts, tiny.experts_per_token, tiny.shared_expert_size) == (4, 1, 0)
    assert load_model(MODELS / "llama-3-8b.json").num_experts == 0
    # the top-k routing weights renormalised: Mixtral's always, Qwen-MoE's as its config says (false by default)
    assert mixtral.norm_topk_prob and not qwen.norm_topk_prob
    assert not parse_model(_TINY + "num_experts: 4\nexperts_per_token: 2\nnorm_topk_prob: false\n", "yaml", "m.yaml",
                           "m").norm_topk_prob


def _bad_json(**change):
    d = {**LLAMA, **change}
    return json.dumps({k: v for k, v in d.items() if v is not ...})


@pytest.mark.parametrize("text,fmt,field", [
    (_bad_json(hidden_size=...), "json", "hidden_size"),
    (_bad_json(hidden_size=0), "json", "hidden_size"),
    (_bad_json(hidden_size=True), "json", "hidden_size"),
    (_bad_json(vocab_size="big"), "json", "vocab_size"),
    (_bad_json(intermediate_size=1 << 30), "json", "intermediate_size"),
    (_bad_json(num_key_value_heads=5), "json", "num_key_value_heads"),
    (_bad_json(head_dim=..., num_attention_heads=24), "json", "head_dim"),
    (_bad_json(hidden_act="relu2"), "json", "hidden_act"),
    (_bad_json(attention_bias="yes"), "json", "attention_bias"),
    (_bad_json(attention_bias=True), "json", "attention_bias"),  # a Llama config's also biases o_proj
    (_bad_json(mlp_bias=True), "json", "mlp_bias"),  # SwiGLU's gate and up would be biased
    (_bad_json(model_type="gemma", hidden_act="gelu_pytorch_tanh"), "json", "model_type"),
    (_bad_json(model_type=3), "json", "model_type"),
    (_bad_json(num_local_experts=8), "json", "num_experts_per_tok"),  # a MoE config must say its top-k
    (_bad_json(num_local_experts=8, num_experts_per_tok=9), "json", "num_experts_per_tok"),
    (_bad_json(num_local_experts=0.5, num_experts_per_tok=1), "json", "num_local_experts"),
    (_bad_json(num_experts=60, num_experts_per_tok=4, mlp_only_layers=[0]), "json", "mlp_only_layers"),
    (_bad_json(num_experts=60, num_experts_per_tok=4, decoder_sparse_step=2), "json", "decoder_sparse_step"),
    (_bad_json(num_local_experts=8, num_experts_per_tok=2, mlp_bias=True), "json", "mlp_bias"),
    (_bad_json(n_routed_experts=64, num_experts_per_tok=6), "json", "n_routed_experts"),  # DeepSeek
    (_bad_json(kv_lora_rank=512), "json", "kv_lora_rank"),  # MLA
    (_bad_json(rms_norm_eps=..., layer_norm_eps=1e-5), "json", "layer_norm_eps"),
    (_bad_json(rms_norm_eps=0), "json", "rms_norm_eps"),
    (_bad_json(rms_norm_eps="1e-5"), "json", "rms_norm_eps"),
    (_bad_json(rope_theta=-1.0), "json", "rope_theta"),
    ('{"hidden_size": 1, "hidden_size": 2}', "json", "hidden_size"),
    ("{not json", "json", ""),
    ("[1, 2]", "json", ""),
    ("hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\nhiden: 1\n", "yaml", "hiden"),
    ("hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\nmlp: geglu\n", "yaml", "mlp"),
    ("hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\nnorm: layernorm\n", "yaml",
     "norm"),
    ("hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\nname: a/b\n", "yaml", "name"),
    ("hidden_size: 64\nhidden_size: 65\n", "yaml", ""),
    (_TINY + "num_experts: 8\nexperts_per_token: 9\n", "yaml", "experts_per_token"),
    (_TINY + "num_experts: 8\n", "yaml", "experts_per_token"),
    (_TINY + "experts_per_token: 2\n", "yaml", "experts_per_token"),
    (_TINY + "num_experts: 8\nexperts_per_token: 2\nmlp: gelu\n", "yaml", "mlp"),
    (_TINY + "num_experts: 8\nexperts_per_token: 2\nshared_expert_size: -1\n", "yaml", "shared_expert_size"),
    (_TINY + "num_experts: 8\nexperts_per_token: 2\nnorm_topk_prob: 1\n", "yaml", "norm_topk_prob"),
    (_TINY + "norm_topk_prob: true\n", "yaml", "norm_topk_prob"),
    ("a: [", "yaml", ""),
    ("just text", "yaml", ""),
    ('{"hidden_size": ' + "9" * 5000 + "}", "json", ""),  # more digits than Python's int() reads: a ValueError
    ('{"rope_scaling": {"factor": -' + "1" * 4400 + "}}", "json", ""),
    ("hidden_size: " + "9" * 5000 + "\n", "yaml", ""),
])
def test_refusals_name_the_file_and_field(text, fmt, field):
    with pytest.raises(ModelError) as e:
        parse_model(text, fmt, "m.cfg", "m")
    message = str(e.value)
    assert "\n" not in message and message.startswith("m.cfg: ") and e.value.field == field
    if field:
        assert f"m.cfg: {field}: " in message


def test_file_refusals(tmp_path):
    cases = {tmp_path / "missing.json": "no such file", tmp_path / "m.txt": ".json", tmp_path: ".json",
             tmp_path / "big.json": "larger than", tmp_path / "bin.yaml": "UTF-8"}
    (tmp_path / "m.txt").write_text("{}")
    (tmp_path / "big.json").write_text(" " * (2 << 20))
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00")
    (tmp_path / "dir.json").mkdir()
    cases[tmp_path / "dir.json"] = "directory"
    for path, words in cases.items():
        with pytest.raises(ModelError) as e:
            load_model(path)
        assert str(e.value).startswith(str(path)) and words in str(e.value), str(e.value)


def _config(folder: Path, **extra) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**LLAMA, **extra}))
    return folder / "config.json"


def test_a_config_json_is_named_for_its_model_not_config(tmp_path):
    # issue 41: two models' config.json were both "config", and shared one output folder
    assert load_model(_config(tmp_path / "Llama-3.2-1B")).name == "Llama-3.2-1B"
    assert load_model(_config(tmp_path / "a", _name_or_path="meta-llama/Meta-Llama-3-8B")).name == "Meta-Llama-3-8B"
    assert load_model(_config(tmp_path / "b", _name_or_path="/home/me/ckpt/my model/")).name == "my-model"
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2-7B" / "snapshots" / "0123abcd"
    assert load_model(_config(snapshot)).name == "Qwen2-7B"  # the Hugging Face cache's repository, not the hash
    assert load_model(_config(tmp_path / "__")).name == "LlamaForCausalLM-4096x14336x32"  # architecture and sizes
    assert load_model(MODELS / "llama-3-8b.json").name == "llama-3-8b"  # a file named for its model keeps its name


def test_a_name_given_wins_and_is_checked(tmp_path):
    config = _config(tmp_path / "x", _name_or_path="org/other")
    assert load_model(config, name="mine").name == "mine"
    assert load_model(MODELS / "tiny.yaml", name="tiny-2").name == "tiny-2"  # over a YAML's own name too
    with pytest.raises(ModelError, match="name: expected letters.*got 'a b'"):
        load_model(config, name="a b")


@pytest.mark.parametrize("change,field,words", [
    # issue 41: Llama's MLP is gated whatever hidden_act says: a GELU there is GeGLU, never a plain GELU MLP
    (dict(hidden_act="gelu_pytorch_tanh"), "hidden_act", "whose MLP is gated"),
    (dict(model_type="qwen2", hidden_act="gelu"), "hidden_act", "GeGLU"),
    (dict(model_type="gpt_neox", hidden_act="silu"), "hidden_act", "not gated"),
    # a Gemma config without model_type: its GeGLU and soft-capping must not vanish from the plan
    (dict(model_type=..., hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh"),
     "hidden_activation", "no model_type"),
    (dict(model_type=..., attn_logit_softcapping=50.0), "attn_logit_softcapping", "soft-capped attention logits"),
    (dict(model_type=..., final_logit_softcapping=30.0), "final_logit_softcapping", "soft-capped final logits"),
    (dict(sliding_window="all"), "sliding_window", "positive integer"),
])
def test_what_the_plan_would_compute_otherwise_is_refused(change, field, words):
    with pytest.raises(ModelError) as e:
        parse_model(_bad_json(**change), "json", "m.json")
    assert e.value.field == field and words in str(e.value) and "\n" not in str(e.value)


def test_mlp_follows_the_family_and_the_window_is_kept():
    assert parse_model(_bad_json(model_type="gpt_neox", hidden_act="gelu", mlp_bias=True), "json").mlp == "gelu"
    assert parse_model(_bad_json(model_type="llama"), "json").mlp == "swiglu"
    assert parse_model(_bad_json(sliding_window=4096), "json").sliding_window == 4096
    assert parse_model(_bad_json(sliding_window=None), "json").sliding_window == 0
    off = parse_model(_bad_json(model_type="qwen2", sliding_window=4096, use_sliding_window=False), "json")
    assert off.sliding_window == 0  # Qwen2 names a window it does not use
