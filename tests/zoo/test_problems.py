"""A model's kernel problems per token count, and the experiments that search them."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.experiment.config import parse_experiment
from evo.zoo import KernelProblem, ModelSpec, experiments_for, layer_problems, load_model

MODELS = Path(__file__).resolve().parents[2] / "experiments" / "models"


def _by_role(problems: list[KernelProblem], tokens: int) -> dict[str, tuple[str | None, tuple[int, ...]]]:
    return {p.role: (p.operator, p.sizes) for p in problems if p.tokens == tokens}


def test_llama_3_8b():
    problems = layer_problems(load_model(MODELS / "llama-3-8b.json"), [16, 2048])
    assert len(problems) == 15 and {p.dtype for p in problems} == {"bf16"}
    assert _by_role(problems, 2048) == {
        "norm": ("rmsnorm", (2048, 4096)),
        "qkv": ("gemm", (2048, 4096 + 2 * 8 * 128, 4096)),
        "attention": ("attention+causal", (1, 32, 8, 2048, 2048, 128)),
        "o_proj": ("gemm+residual", (2048, 4096, 4096)),
        "gate_up": ("gemm+swiglu", (2048, 14336, 4096)),
        "down": ("gemm+residual", (2048, 4096, 14336)),
        "lm_head": ("gemm", (2048, 128256, 4096)),
        "sampling_softmax": ("softmax", (2048, 128256)),
    }
    norm = next(p for p in problems if p.operator == "rmsnorm")
    assert norm.uses == 2 and norm.scope == "layer"
    assert {p.role for p in problems if p.scope == "model"} == {"lm_head", "linear_lm_head", "sampling_softmax"}
    assert all(p.searchable for p in problems)


def test_llama_3_8b_decode_runs_the_linear_roles_and_rope_cache():
    """T <= 16: the projections read nn.Linear's weights (linear), the norms fused into qkv, gate_up and lm_head;
    with a KV cache, rope_cache at every T, its context dim the cache's capacity (context + the largest T) less T."""
    problems = layer_problems(load_model(MODELS / "llama-3-8b.json"), [1, 16, 2048], context=4096)
    assert _by_role(problems, 1) == {
        "linear_qkv": ("linear+rmsnorm", (1, 6144, 4096)),
        "rope": ("rope_cache", (1, 32, 8, 128, 4096 + 2048 - 1)),
        "attention": ("attention+causal", (1, 32, 8, 1, 4097, 128)),
        "cache_attention": ("cache_attention", (1, 32, 8, 1, 4097, 128)),  # over a static cache, with its mask
        "linear_o_proj": ("linear+residual", (1, 4096, 4096)),
        "linear_gate_up": ("linear+rmsnorm+swiglu", (1, 14336, 4096)),
        "linear_down": ("linear+residual", (1, 4096, 14336)),
        "linear_lm_head": ("linear+rmsnorm", (1, 128256, 4096)),
        "sampling_softmax": ("softmax", (1, 128256)),
    }
    assert set(_by_role(problems, 16)) == set(_by_role(problems, 1))
    assert _by_role(problems, 2048)["rope"] == ("rope_cache", (2048, 32, 8, 128, 4096))
    assert "linear_qkv" not in _by_role(problems, 2048) and "norm" in _by_role(problems, 2048)
    assert not any(p.note for p in problems if p.tokens <= 16)
    # the linear roles can be left out: the gemm roles at every T
    assert "qkv" in _by_role(layer_problems(load_model(MODELS / "llama-3-8b.json"), [1], linear_max_tokens=0), 1)
    assert "rope" not in _by_role(layer_problems(load_model(MODELS / "llama-3-8b.json"), [1]), 1)  # no cache


def test_a_kv_cache_lengthens_the_keys_of_attention_only():
    spec = load_model(MODELS / "llama-3-8b.json")
    plain, cached = layer_problems(spec, [4], context=8188), layer_problems(spec, [4])
    assert _by_role(plain, 4)["attention"] == ("attention+causal", (1, 32, 8, 4, 8192, 128))
    assert _by_role(plain, 4)["cache_attention"] == ("cache_attention", (1, 32, 8, 4, 8192, 128))
    assert {k: v for k, v in _by_role(plain, 4).items() if k not in ("attention", "rope", "cache_attention")} == \
        {k: v for k, v in _by_role(cached, 4).items() if k != "attention"}
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="context"):
            layer_problems(spec, [4], context=bad)
    text = experiments_for(spec, [1, 4], context=1000)["attention+causal"]
    assert [p.key for p in parse_experiment(text).problems] == ["attention+causal:1x32x8x1x1001x128:bf16",
                                                                "attention+causal:1x32x8x4x1004x128:bf16"]


def test_fp32_leaves_attention_to_torch_and_says_so():
    problems = layer_problems(load_model(MODELS / "tiny.yaml"), [4], "fp32")
    attention = next(p for p in problems if p.role == "attention")
    assert not attention.searchable and "no fp32 kernels" in attention.note
    assert "attention+causal" not in experiments_for(load_model(MODELS / "tiny.yaml"), [4], "fp32")


def test_qwen2_has_a_qkv_bias():
    """Qwen2's qkv bias: gemm+bias above 16 tokens, linear+rmsnorm+bias (norm, projection and bias in one) below."""
    problems = layer_problems(load_model(MODELS / "qwen2-7b.json"), [1, 32])
    by_role = _by_role(problems, 1)
    assert by_role["linear_qkv"] == ("linear+rmsnorm+bias", (1, 3584 + 2 * 4 * 128, 3584))
    assert "norm" not in by_role and not any(p.note for p in problems if p.tokens == 1)
    assert by_role["linear_gate_up"] == ("linear+rmsnorm+swiglu", (1, 18944, 3584))
    assert by_role["linear_lm_head"] == ("linear+rmsnorm", (1, 152064, 3584))
    assert _by_role(problems, 32)["qkv"] == ("gemm+bias", (32, 3584 + 2 * 4 * 128, 3584))
    assert _by_role(problems, 32)["gate_up"] == ("gemm+swiglu", (32, 18944, 3584))


@pytest.mark.parametrize("mlp,mlp_bias,up,down", [
    ("gelu", True, "gemm+bias+gelu", "gemm+bias+residual"),
    ("gelu", False, "gemm+gelu", "gemm+residual"),
    ("gelu_tanh", True, "gemm+bias+gelu_tanh", "gemm+bias+residual"),
    ("gelu_tanh", False, "gemm+gelu_tanh", "gemm+residual"),
])
def test_gelu_models(mlp, mlp_bias, up, down):
    spec = ModelSpec("g", 256, 1024, 4, 4, 64, 500, mlp=mlp, mlp_bias=mlp_bias)
    by_role = _by_role(layer_problems(spec, [32], "fp16"), 32)
    assert by_role["up"] == (up, (32, 1024, 256)) and by_role["down"] == (down, (32, 256, 1024))
    assert "gate_up" not in by_role
    # T <= 16: linear has no GELU, so up keeps its gemm role and the post-attention norm its own (one note says so)
    problems = layer_problems(spec, [8], "fp16")
    decode = _by_role(problems, 8)
    assert decode["up"] == (up, (8, 1024, 256)) and decode["norm"] == ("rmsnorm", (8, 256))
    assert decode["linear_qkv"][0] == "linear+rmsnorm" and "linear_gate_up" not in decode
    assert decode["linear_down"] == ("linear+bias+residual" if mlp_bias else "linear+residual", (8, 256, 1024))
    assert [p.note for p in problems if p.role == "up"] == [f"T <= 16: g keeps the gemm roles for up ({up}: linear has "
                                                            f"no {mlp}), with the norm before them apart"]


def test_bad_token_counts():
    spec = load_model(MODELS / "tiny.yaml")
    for bad in ([0], [-1], [1.5], [True]):
        with pytest.raises(ValueError, match="positive integers"):
            layer_problems(spec, bad)
    for wall_s in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="wall_s"):
            experiments_for(spec, [1], wall_s=wall_s)


def test_mixtral_plans_the_expert_gemms():
    """A MoE MLP: the post-attention norm apart, the router (linear at T <= 16, gemm above), moe_gate_up and moe_down
    at every T; no dense gate_up or down."""
    problems = layer_problems(load_model(MODELS / "mixtral-8x7b.json"), [1, 2048])
    decode, prefill = _by_role(problems, 1), _by_role(problems, 2048)
    assert decode["moe_gate_up"] == ("moe_gate_up", (1, 8, 2, 14336, 4096)) == \
        (prefill["moe_gate_up"][0], (1, *prefill["moe_gate_up"][1][1:]))
    assert prefill["moe_down"] == ("moe_down", (2048, 8, 2, 4096, 14336))
    assert decode["linear_router"] == ("linear", (1, 8, 4096)) and prefill["router"] == ("gemm", (2048, 8, 4096))
    assert decode["norm"] == ("rmsnorm", (1, 4096)) and decode["linear_qkv"][0] == "linear+rmsnorm"
    assert not {"gate_up", "down", "linear_gate_up", "linear_down"} & (set(decode) | set(prefill))
    assert any("router's softmax and top-k" in p.note for p in problems)
    norm = next(p for p in problems if p.role == "norm" and p.tokens == 1)
    assert norm.uses == 1  # the input norm is linear_qkv's prologue; the post-attention one runs apart


def test_qwen_moe_plans_its_shared_expert():
    problems = layer_problems(load_model(MODELS / "qwen1.5-moe-a2.7b.json"), [16, 128])
    decode, prefill = _by_role(problems, 16), _by_role(problems, 128)
    assert decode["moe_gate_up"] == ("moe_gate_up", (16, 60, 4, 1408, 2048))
    assert decode["linear_shared_gate_up"] == ("linear+swiglu", (16, 5632, 2048))
    assert decode["linear_shared_down"] == ("linear", (16, 2048, 5632))
    assert prefill["shared_gate_up"] == ("gemm+swiglu", (128, 5632, 2048))
    assert prefill["qkv"][0] == "gemm+bias"  # Qwen2-MoE's qkv_bias
    assert any("shared expert's sigmoid gate" in p.note for p in problems)


@pytest.mark.parametrize("model", ["llama-3-8b.json", "qwen2-7b.json", "mistral-7b.json", "tiny.yaml",
                                   "mixtral-8x7b.json", "qwen1.5-moe-a2.7b.json"])
def test_experiments_parse_and_hold_the_plans_problems(model):
    spec = load_model(MODELS / model)
    tokens = [1, 16, 128, 2048]
    texts = experiments_for(spec, tokens, "bf16", wall_s=12.5, output="out/zoo")
    plan = [p for p in layer_problems(spec, tokens) if p.searchable]
    assert set(texts) == {p.operator for p in plan}
    for operator, text in texts.items():
        e = parse_experiment(text, f"{operator}.yaml")
        assert e.operator == operator and e.output == "out/zoo" and e.executor.kind == "ray"
        assert e.budget.wall_s == 12.5 and e.name == f"{spec.name}_{operator.replace('+', '-')}"
        wanted = list(dict.fromkeys(f"{operator}:{'x'.join(map(str, p.sizes))}:bf16" for p in plan
                                    if p.operator == operator))
        assert [p.key for p in e.problems] == wanted
        assert e.evaluation.objective == "gpu"  # what CUDA graphs replay (serving engines' decode)


def test_the_ranking_clock_is_chosen():
    spec = load_model(MODELS / "tiny.yaml")
    text = experiments_for(spec, [32], objective="call")["gemm"]
    assert parse_experiment(text, "gemm.yaml").evaluation.objective == "call"
    with pytest.raises(ValueError, match="objective must be one of call, gpu"):
        experiments_for(spec, [4], objective="graph")


def test_a_shape_shared_by_roles_is_searched_once():
    # o_proj (T x hidden x heads*head_dim) and down (T x hidden x intermediate) coincide here
    spec = ModelSpec("same", 128, 128, 2, 2, 64, 300)
    text = experiments_for(spec, [4])["linear+residual"]
    experiment = parse_experiment(text)
    assert [p.key for p in experiment.problems] == ["linear+residual:4x128x128:bf16"]
    assert "linear_o_proj T=4, linear_down T=4" in text
