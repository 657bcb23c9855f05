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
    assert len(problems) == 16 and {p.dtype for p in problems} == {"bf16"}
    assert _by_role(problems, 16) == {
        "norm": ("rmsnorm", (16, 4096)),
        "qkv": ("gemm", (16, 4096 + 2 * 8 * 128, 4096)),
        "attention": ("attention+causal", (1, 32, 8, 16, 16, 128)),
        "o_proj": ("gemm+residual", (16, 4096, 4096)),
        "gate_up": ("gemm+swiglu", (16, 14336, 4096)),
        "down": ("gemm+residual", (16, 4096, 14336)),
        "lm_head": ("gemm", (16, 128256, 4096)),
        "sampling_softmax": ("softmax", (16, 128256)),
    }
    norm = next(p for p in problems if p.operator == "rmsnorm")
    assert norm.uses == 2 and norm.scope == "layer"
    assert {p.role for p in problems if p.scope == "model"} == {"lm_head", "sampling_softmax"}
    assert all(p.searchable for p in problems)


def test_a_kv_cache_lengthens_the_keys_of_attention_only():
    spec = load_model(MODELS / "llama-3-8b.json")
    plain, cached = layer_problems(spec, [4], context=8188), layer_problems(spec, [4])
    assert _by_role(plain, 4)["attention"] == ("attention+causal", (1, 32, 8, 4, 8192, 128))
    assert {k: v for k, v in _by_role(plain, 4).items() if k != "attention"} == \
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
    by_role = _by_role(layer_problems(load_model(MODELS / "qwen2-7b.json"), [1]), 1)
    assert by_role["qkv"] == ("gemm+bias", (1, 3584 + 2 * 4 * 128, 3584))
    assert by_role["gate_up"] == ("gemm+swiglu", (1, 18944, 3584))
    assert by_role["lm_head"] == ("gemm", (1, 152064, 3584))


@pytest.mark.parametrize("mlp,mlp_bias,up,down", [
    ("gelu", True, "gemm+bias+gelu", "gemm+bias+residual"),
    ("gelu", False, "gemm+gelu", "gemm+residual"),
    ("gelu_tanh", True, "gemm+bias+gelu_tanh", "gemm+bias+residual"),
    ("gelu_tanh", False, "gemm+gelu_tanh", "gemm+residual"),
])
def test_gelu_models(mlp, mlp_bias, up, down):
    spec = ModelSpec("g", 256, 1024, 4, 4, 64, 500, mlp=mlp, mlp_bias=mlp_bias)
    by_role = _by_role(layer_problems(spec, [8], "fp16"), 8)
    assert by_role["up"] == (up, (8, 1024, 256)) and by_role["down"] == (down, (8, 256, 1024))
    assert "gate_up" not in by_role


def test_bad_token_counts():
    spec = load_model(MODELS / "tiny.yaml")
    for bad in ([0], [-1], [1.5], [True]):
        with pytest.raises(ValueError, match="positive integers"):
            layer_problems(spec, bad)
    for wall_s in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="wall_s"):
            experiments_for(spec, [1], wall_s=wall_s)


@pytest.mark.parametrize("model", ["llama-3-8b.json", "qwen2-7b.json", "mistral-7b.json", "tiny.yaml"])
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
    text = experiments_for(spec, [4], objective="call")["gemm"]
    assert parse_experiment(text, "gemm.yaml").evaluation.objective == "call"
    with pytest.raises(ValueError, match="objective must be one of call, gpu"):
        experiments_for(spec, [4], objective="graph")


def test_a_shape_shared_by_roles_is_searched_once():
    # o_proj (T x hidden x heads*head_dim) and down (T x hidden x intermediate) coincide here
    spec = ModelSpec("same", 128, 128, 2, 2, 64, 300)
    text = experiments_for(spec, [4])["gemm+residual"]
    experiment = parse_experiment(text)
    assert [p.key for p in experiment.problems] == ["gemm+residual:4x128x128:bf16"]
    assert "o_proj T=4, down T=4" in text
