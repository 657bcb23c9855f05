"""`evo zoo MODEL --dtype fp8` (evo.zoo.fp8_problems): a Llama-style layer with FP8 weights planned with its
projections as fp8_gemm+channel, what the FP8 GEMM does not fuse noted as torch's, its experiments written under
<model>-fp8; what it cannot serve (MoE and Gemma-2 layers) refused in one line, exit status 2. --run and --collect:
tests/surface/test_zoo_fp8.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.experiment.config import load_experiment
from evo.surface.cli import main
from evo.zoo import layer_problems, load_model
from evo.zoo.fp8_problems import FP8_OPERATOR

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "experiments" / "models"


def test_llama_projections_are_fp8_gemms_and_the_rest_is_the_bf16_plan():
    spec = load_model(MODELS / "llama-3-8b.json")
    problems = layer_problems(spec, [1, 2048], "bf16", context=0, weights="fp8")
    by = {(p.role, p.tokens): p for p in problems}
    for t in (1, 2048):
        assert by["fp8_qkv", t].sizes == (t, 6144, 4096) and by["fp8_o_proj", t].sizes == (t, 4096, 4096)
        assert by["fp8_gate_up", t].sizes == (t, 28672, 4096) and by["fp8_down", t].sizes == (t, 4096, 14336)
        assert {by[r, t].operator for r in ("fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down")} == {FP8_OPERATOR}
        assert by["norm", t].operator == "rmsnorm" and by["norm", t].uses == 2
        assert by["attention", t].operator == "attention+causal" and all(p.dtype == "bf16" for p in problems)
    assert by["linear_lm_head", 1].operator == "linear+rmsnorm" and by["lm_head", 2048].operator == "gemm"
    assert not any(p.operator and p.operator.startswith(("linear+residual", "gemm+swiglu", "linear+rmsnorm+swiglu"))
                   for p in problems)
    note = by["fp8_qkv", 1].note
    assert "per-token FP8 quantization" in note and "SwiGLU" in note and "lm_head keeps bf16 weights" in note
    # with a KV cache, a decode step also has the static cache's attention, as the bf16 plan
    cached = layer_problems(spec, [1], "bf16", context=100, weights="fp8")
    assert {p.role for p in cached} >= {"rope", "cache_attention", "fp8_qkv"}


def test_biases_and_gelu_are_torchs():
    qwen = layer_problems(load_model(MODELS / "qwen2-7b.json"), [16], "bf16", weights="fp8")
    assert "the biases" in next(p for p in qwen if p.role == "fp8_qkv").note
    tiny_gelu = MODELS / "tiny.yaml"
    spec = load_model(tiny_gelu)
    from dataclasses import replace

    gelu = layer_problems(replace(spec, mlp="gelu"), [32], "bf16", weights="fp8")
    up = next(p for p in gelu if p.role == "fp8_up")
    assert up.sizes == (32, 128, 64) and "GELU" in up.note


def test_unknown_weights_are_refused():
    with pytest.raises(ValueError, match="weights must be one of bf16, fp8; got 'int4'"):
        layer_problems(load_model(MODELS / "tiny.yaml"), [1], weights="int4")


def test_evo_zoo_writes_the_fp8_experiments(tmp_path, capsys):
    assert main(["zoo", str(MODELS / "llama-3-8b.json"), "--dtype", "fp8", "--tokens", "16,2048", "-o",
                 str(tmp_path), "--wall-s", "5"]) == 0
    out = capsys.readouterr().out
    # its own folder and runs beside a bf16 zoo of the model; the printed --collect repeats --dtype fp8
    assert "fp8 weights, bf16" in out and "--dtype fp8" in out and out.rstrip().endswith("--context 0 --collect")
    assert not (tmp_path / "llama-3-8b").exists()
    experiment = load_experiment(tmp_path / "llama-3-8b-fp8" / "fp8_gemm-channel.yaml")
    assert experiment.name == "llama-3-8b-fp8_fp8_gemm-channel"
    assert experiment.operator == FP8_OPERATOR and experiment.budget.wall_s == 5
    assert [p.key for p in experiment.problems][:2] == ["fp8_gemm+channel:16x6144x4096:bf16",
                                                         "fp8_gemm+channel:16x4096x4096:bf16"]
    assert len(experiment.problems) == 8
    assert main(["zoo", str(MODELS / "tiny.yaml"), "--dtype", "fp8", "--smoke", "-o", str(tmp_path)]) == 0
    smoke = load_experiment(tmp_path / "tiny-fp8" / "fp8_gemm-channel.yaml")
    assert {p.dtype for p in smoke.problems} == {"fp16"} and smoke.executor.kind == "smoke"
    assert main(["zoo", str(MODELS / "tiny.yaml"), "--dtype", "fp8", "--name", "mine", "-o", str(tmp_path)]) == 0
    assert (tmp_path / "mine" / "fp8_gemm-channel.yaml").exists()  # --name names it as given


@pytest.mark.parametrize("model,extra,words", [
    ("mixtral-8x7b.json", [], "mixtral-8x7b is a Mixture-of-Experts model"),
    ("mixtral-8x7b.json", ["--run"], "no FP8 operator serves its experts yet"),
    ("gemma-2-9b.json", [], "gemma-2-9b is a Gemma-2 layer"),
    ("gemma-2-9b.json", ["--collect"], "the FP8 plan serves Llama-style layers only"),
    ("llama-3-8b.json", ["--report"], "no zoo at"),
    ("llama-3-8b.json", ["--dtype", "fp4"], "expected one of fp16, bf16, fp32, or fp8"),
])
def test_what_the_fp8_plan_cannot_serve_is_one_line(tmp_path, capsys, model, extra, words):
    argv = ["zoo", str(MODELS / model), "-o", str(tmp_path), *extra]
    assert main(argv if "--dtype" in extra else [*argv, "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and err.startswith("evo: error:"), err
    assert not any(tmp_path.rglob("*.yaml"))
