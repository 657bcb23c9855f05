"""A config's quantization_config (evo.zoo.model_quant): FP8 checkpoints the zoo's FP8 plan computes read as
quantization "fp8" and `evo zoo` plans them --dtype fp8 unless told otherwise; every other quantization is one line
naming its field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evo.experiment.config import load_experiment
from evo.surface.cli import main
from evo.zoo.model import ModelError, parse_model

MODELS = Path(__file__).resolve().parents[2] / "experiments" / "models"
LLAMA = json.loads((MODELS / "llama-3-8b.json").read_text())
MIXTRAL = json.loads((MODELS / "mixtral-8x7b.json").read_text())


def _scheme(bits=8, kind="float", strategy="channel", dynamic=False):
    return {"num_bits": bits, "type": kind, "strategy": strategy, "dynamic": dynamic, "symmetric": True}


def _compressed(weights=None, activations=None):
    group = {"targets": ["Linear"], "weights": weights or _scheme(),
             "input_activations": activations or _scheme(strategy="token", dynamic=True)}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": group}}


def _spec(quantization, base=LLAMA):
    return parse_model(json.dumps({**base, "quantization_config": quantization}), "json", "m.json", "m")


@pytest.mark.parametrize("config", [
    {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0},  # Meta's Llama-3.1 FP8
    _compressed(),  # llm-compressor's FP8-dynamic
    _compressed(weights=_scheme(strategy="tensor")),  # one weight scale: a per-channel one repeated
])
def test_fp8_checkpoints_the_plan_computes(config):
    assert _spec(config).quantization == "fp8"
    assert parse_model(json.dumps(LLAMA), "json", "m.json", "m").quantization == ""  # none without the field
    assert parse_model("name: t\nhidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\n"
                       "quantization: fp8\n", "yaml").quantization == "fp8"  # a model YAML says it by name


@pytest.mark.parametrize("config,field,words", [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "quantization_config.weight_block_size",
     "FP8 weights in blocks"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "quantization_config.weight_block_size", "[128, 128]"),
    ({"quant_method": "awq", "bits": 4}, "quantization_config.quant_method", "'awq'"),
    ("fp8", "quantization_config", "expected a mapping"),
    (_compressed(weights=_scheme(bits=4, kind="int")), "group_0.weights.num_bits", "8-bit floats"),
    (_compressed(weights=_scheme(strategy="block")), "group_0.weights.strategy", "per output channel"),
    (_compressed(activations=_scheme(strategy="tensor", dynamic=False)), "group_0.input_activations.strategy",
     "per token"),
    (_compressed(activations=_scheme(strategy="token", dynamic=False)), "group_0.input_activations.dynamic",
     "at run time"),
    ({"quant_method": "compressed-tensors"}, "quantization_config.config_groups", "quantization groups"),
])
def test_other_quantizations_are_one_line_naming_the_field(config, field, words):
    with pytest.raises(ModelError) as e:
        _spec(config)
    assert field in e.value.field and words in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ModelError, match="quantization: expected one of"):
        parse_model("hidden_size: 64\nintermediate_size: 128\nnum_attention_heads: 4\nvocab_size: 256\n"
                    "quantization: int4\n", "yaml")


def test_evo_zoo_plans_an_fp8_checkpoint_as_fp8_unless_told(tmp_path, capsys):
    model = tmp_path / "llama-fp8.json"
    model.write_text(json.dumps({**LLAMA, "quantization_config": _compressed()}))
    assert main(["zoo", str(model), "--tokens", "16", "-o", str(tmp_path / "z"), "--wall-s", "5"]) == 0
    captured = capsys.readouterr()
    assert "quantization_config says FP8 weights" in captured.err and "fp8 weights, bf16" in captured.out
    experiment = load_experiment(tmp_path / "z" / "llama-fp8" / "fp8_gemm-channel.yaml")  # named -fp8 already
    assert experiment.problems[0].key == "fp8_gemm+channel:16x6144x4096:bf16"
    assert main(["zoo", str(model), "--tokens", "16", "--dtype", "bf16", "-o", str(tmp_path / "b")]) == 0
    planned = [f.name for f in (tmp_path / "b" / "llama-fp8").glob("*.yaml")]
    assert planned and not any(name.startswith("fp8_gemm") for name in planned)  # told bf16: the unquantized plan
    assert "quantization_config" not in capsys.readouterr().err


def test_evo_zoo_refuses_what_the_fp8_plan_cannot_serve_in_one_line(tmp_path, capsys):
    moe = tmp_path / "mixtral-fp8.json"
    moe.write_text(json.dumps({**MIXTRAL, "quantization_config": {"quant_method": "fbgemm_fp8"}}))
    assert main(["zoo", str(moe), "-o", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quantization_config: FP8 weights, but" in err and "--dtype bf16" in err, err
    block = tmp_path / "qwen3-fp8.json"
    block.write_text(json.dumps({**LLAMA, "quantization_config": {"quant_method": "fp8"}}))
    assert main(["zoo", str(block), "-o", str(tmp_path / "z")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weight_block_size" in err and err.startswith("evo: error:"), err
    assert not any((tmp_path / "z").rglob("*.yaml"))
