"""The layer bench with FP8 weights on the CPU (`python -m evo.bench.zoo_layer ... --device cpu` on the tiny model's
FP8 zoo): the FP8 layer picked from the zoo's roles, its quantization error as the least tolerance, the line saying
what runs where and how torch runs its FP8 GEMMs; an FP8 zoo on a bf16 layer, or a model the FP8 plan does not serve,
refused in one line."""

from __future__ import annotations

import json

import pytest

from evo.bench import zoo_layer
from tests.fixtures.tiny_zoo import CONTEXT, TINY
from tests.zoo._layer_cases import MODELS


def bench(zoo, out, *extra, model=TINY):
    return zoo_layer.main([str(zoo), str(model), "--device", "cpu", "--dtype", "fp16", "--tokens", "1,4",
                           "--context", str(CONTEXT), "--rounds", "1", "--out", str(out), *extra])


@pytest.mark.slow
def test_the_fp8_layer_bench_on_the_cpu(tiny_fp8_zoo, tmp_path, capsys):
    assert bench(tiny_fp8_zoo, tmp_path, "--decode-steps", "2") == 0
    doc = json.loads((tmp_path / "zoo.json").read_text())
    # the decode loop runs the FP8 layer's projections too (evo.zoo.decode calls its _project)
    assert doc["decode"]["within_tolerance"] and doc["decode"]["zoo_eager_ms"] > 0
    assert doc["model"] == "tiny-fp8" and doc["weights"] == "fp8" and doc["dtype"] == "fp16"
    assert doc["layer"]["kind"] == "fp8" and doc["layer"]["torch_way"] in ("scaled_mm", "dequantize")
    assert {r: doc["roles"][r] for r in ("fp8_qkv", "fp8_down")} == {"fp8_qkv": "fp8_gemm+channel",
                                                                     "fp8_down": "fp8_gemm+channel"}
    assert "FP8 weights: e4m3 with per-channel scales" in doc["layer"]["note"]
    assert "the per-token FP8 quantization of each projection's input" in doc["layer"]["note"]
    for row in doc["layers"]:
        q = row["fp8_quantization_error"]
        assert 0 < q < 0.05 and row["tolerance"] == max(3e-3, q)
        assert row["within_tolerance"] and row["max_rel_error"] <= row["tolerance"]
        assert row["eager_ms"] > 0 and row["zoo_eager_ms"] > 0
    table = (tmp_path / "zoo.md").read_text()
    assert "FP8 weights: the FP8 layer's error against the bf16 layer" in table
    assert "evo zoo layer bench: tiny-fp8 (Llama-style layer, FP8 weights" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("extra,model,words", [
    (["--weights", "bf16"], TINY, "is an FP8 zoo (fp8_down, fp8_gate_up, fp8_o_proj, fp8_qkv)"),
    (["--weights", "fp8"], MODELS / "tiny-moe.yaml", "is a Mixture-of-Experts model"),
])
def test_what_the_fp8_bench_cannot_run_is_one_line(tiny_fp8_zoo, tmp_path, capsys, extra, model, words):
    assert bench(tiny_fp8_zoo, tmp_path, *extra, model=model) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err
    assert not (tmp_path / "zoo.json").exists()


@pytest.mark.slow
def test_a_bf16_zoo_asked_for_fp8_is_one_line(tiny_zoo, tmp_path, capsys):
    assert bench(tiny_zoo, tmp_path, "--weights", "fp8") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no fp8_* role" in err
