"""evo.zoo.hf_fp8: a tiny transformers model of each Llama-like family with its projections quantized to FP8 by
quantize_model_fp8 (no download), patched onto ops of the FP8 zoo's roles (stand-ins in plain torch here; the tiny FP8
zoo's real kernels: tests/surface/test_zoo_fp8.py): the zoo's ops serve every projection, the logits are the
unpatched FP8 model's, generate() with a static cache runs, unpatch gives the model back, and roles that cannot
serve are named with why."""

from __future__ import annotations

import pytest
import torch

from tests.zoo._hf_models import FAMILIES, named, prompt, recording, rel, stand_ins, tiny_model

pytest.importorskip("transformers")

from evo.api import patch_model, unpatch_model  # noqa: E402
from evo.zoo.fp8_linear import FP8Linear, fp8_matmul  # noqa: E402
from evo.zoo.hf_fp8 import is_fp8, quantize_model_fp8  # noqa: E402

FP8_ROLES = ("fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down")


def _fp8_stand_in(x_q, w_q, x_scale, w_scale, dtype):
    return fp8_matmul(x_q, x_scale, w_q, w_scale, dtype, "dequantize")


def fp8_ops() -> dict:
    return {r: named(_fp8_stand_in, "fp8_gemm+channel") for r in FP8_ROLES}


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_an_fp8_model_runs_the_zoo_s_fp8_roles(family):
    model = tiny_model(family, torch.float32)
    ids = prompt(5)
    dense = _logits(model, ids)
    assert quantize_model_fp8(model) == 2 * (4 if family == "phi3" else 7) and is_fp8(model)  # 2 layers
    layer = model.model.layers[0]
    assert isinstance(layer.mlp.down_proj, FP8Linear) and layer.mlp.down_proj.weight.dtype == torch.float8_e4m3fn
    assert isinstance(model.lm_head, torch.nn.Linear) and model.lm_head.weight.dtype == torch.float32
    for m in model.modules():
        if isinstance(m, FP8Linear):
            m.torch_way = "dequantize"  # the stand-ins' arithmetic: the patched logits equal these
    ref = _logits(model, ids)
    assert 1e-4 < rel(ref, dense) < 0.25  # FP8's own error (std 0.1 weights): not the dense model, near it
    state = {k: v.clone() for k, v in model.state_dict().items()}
    calls: list = []
    report = patch_model(model, recording({**fp8_ops(), "norm": stand_ins()["norm"]}, calls), quiet=True)
    assert set(report.served) == {*FP8_ROLES, "norm"} and all(t is None for _, t in report.served.values())
    assert (report.copied_bytes > 0) == (family != "phi3")  # q/k/v and gate/up merged once; Phi-3 fuses its own
    torch.testing.assert_close(_logits(model, ids), ref, rtol=1e-5, atol=1e-5)
    roles = [role for role, _ in calls]
    assert {r: roles.count(r) for r in FP8_ROLES} == {r: 2 for r in FP8_ROLES}  # once a layer each
    x_q, w_q, x_scale, w_scale, dtype = calls[1][1] if calls[0][0] == "norm" else calls[0][1]
    assert x_q.dtype == w_q.dtype == torch.float8_e4m3fn and x_scale.shape == (5,) and dtype == torch.float32
    tokens = model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static")
    assert tokens.shape == (1, 8)
    unpatch_model(model)
    assert not any(n.startswith("evo_") for n, _ in model.named_buffers())
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    torch.testing.assert_close(_logits(model, ids), ref, rtol=0, atol=0)


def test_what_cannot_serve_is_named():
    dense = tiny_model("llama", torch.float32)
    report = patch_model(dense, fp8_ops(), quiet=True)
    assert not report.served and "the model's projections are not FP8" in report.kept["fp8_qkv"]
    model = tiny_model("llama", torch.float32)
    quantize_model_fp8(model)
    report = patch_model(model, {**stand_ins(), "fp8_down": fp8_ops()["fp8_down"],
                                 "fp8_up": named(_fp8_stand_in, "fp8_gemm+channel"),
                                 "fp8_qkv": named(_fp8_stand_in, "fp8_gemm+block")}, quiet=True)
    assert "fp8_down" in report.served and "qkv" not in report.served
    assert report.kept["qkv"] == "the model's projections are FP8 (an FP8 zoo's fp8_* roles serve them)"
    assert "fp8_gemm+block cannot serve it" in report.kept["fp8_qkv"]
    assert report.kept["fp8_up"] == "this model's MLP is gated (fp8_gate_up)"
    assert "no kernel in the zoo" in report.kept["fp8_gate_up"]
    with pytest.raises(ValueError, match="FP8 already"):
        quantize_model_fp8(model)
    line = report.line()
    assert "evo's kernels for" in line and "fp8_down" in line and "\n" not in line


@pytest.mark.slow
def test_the_tiny_fp8_zoo_in_a_quantized_llama(tiny_fp8_zoo):
    from evo.api import load_zoo

    model = tiny_model("llama", torch.float16)
    ids = prompt(4)
    dense = _logits(model, ids)
    quantize_model_fp8(model)
    ref = _logits(model, ids)
    ops = load_zoo(tiny_fp8_zoo)
    # the FP8 GEMMs alone see the inputs torch's FP8 linears see: the same e4m3 products, the same logits
    report = patch_model(model, {r: ops[r] for r in FP8_ROLES}, quiet=True)
    assert report.served == {r: ("fp8_gemm+channel", (1, 4)) for r in FP8_ROLES}
    assert rel(_logits(model, ids), ref) < 1e-3
    # the whole zoo: its norm rounds otherwise than transformers' RMSNorm (in fp32 times the weight, then cast), and
    # a difference before a quantization step flips e4m3 roundings after it: within FP8's own error, no more
    calls: list = []
    report = patch_model(model, recording(ops, calls), quiet=True)
    out = _logits(model, ids)
    assert {r for r, _ in calls} >= {*FP8_ROLES, "norm", "attention"}
    assert rel(out, ref) < rel(ref, dense), (rel(out, ref), rel(ref, dense))
    tokens = model.generate(ids, max_new_tokens=2, do_sample=False, cache_implementation="static")
    assert tokens.shape == (1, 6) and sum(r == "fp8_qkv" for r, _ in calls) >= 2 * 3  # 2 layers, 3 forward passes
