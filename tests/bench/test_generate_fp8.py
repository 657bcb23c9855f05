"""`python -m evo.bench.generate` with an FP8 zoo on the CPU: the tiny config's model quantized to FP8 first
(evo.zoo.hf_fp8), the tiny FP8 zoo's real kernels in the interpreter, the FP8 model's own error as the least
tolerance; an FP8 zoo asked for bf16 weights refused in one line."""

from __future__ import annotations

import json

import pytest

from tests.bench.test_generate import _config

pytest.importorskip("transformers")

from evo.bench.generate import main  # noqa: E402


@pytest.mark.slow
def test_an_fp8_zoo_times_an_fp8_model(tmp_path, tiny_fp8_zoo, capsys):
    args = ["--dtype", "fp16", "--prompt", "4", "--new-tokens", "2", "--reps", "1", "--device", "cpu"]
    out = tmp_path / "out"
    assert main([str(tiny_fp8_zoo), _config(tmp_path), *args, "--out", str(out)]) == 0
    doc = json.loads((out / "generate.json").read_text())
    assert doc["weights"] == "fp8" and 0 < doc["fp8_quantization_error"] <= doc["tolerance"]
    assert {"fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down"} <= set(doc["served"])
    assert doc["ways"]["zoo_eager"]["within_tolerance"]
    assert "FP8 weights (every way)" in (out / "generate.md").read_text()
    capsys.readouterr()
    assert main([str(tiny_fp8_zoo), _config(tmp_path), *args, "--weights", "bf16", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is an FP8 zoo (fp8_down, fp8_gate_up, fp8_o_proj, fp8_qkv)" in err
