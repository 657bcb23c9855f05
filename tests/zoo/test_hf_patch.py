"""Patching Hugging Face models (evo.zoo.hf_patch, evo.api.patch_model) with stand-in ops computing each role's
operator with its own reference: the four families' logits and generate() with a static cache match the unpatched
model, a wrong op is caught, calls route where the zoo measured, weights are copied once (or read in place by the
linear operators), refusals change nothing, and unpatch restores the model bit for bit. The real tiny zoo's kernels
run in tests/zoo/test_hf_patch_zoo.py."""

from __future__ import annotations

import pytest
import torch

from tests.zoo._hf_models import (
    FAMILIES,
    gemm_stand_in,
    measured_as,
    named,
    prompt,
    recording,
    rel,
    stand_ins,
    tiny_model,
)

pytest.importorskip("transformers")

from evo.api import patch_model, unpatch_model  # noqa: E402

LAYER_ROLES = ["norm", "qkv", "attention", "o_proj", "norm", "gate_up", "down"]


def _logits(model: torch.nn.Module, ids: torch.Tensor, **kw) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, **kw).logits


def _generate(model: torch.nn.Module, ids: torch.Tensor, **kw) -> torch.Tensor:
    return model.generate(ids, max_new_tokens=3, do_sample=False, **kw)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_patched_model_matches_its_logits_and_generates(family, capsys):
    model = tiny_model(family)
    ids = prompt()
    ref, tokens = _logits(model, ids), _generate(model, ids, cache_implementation="static")
    calls: list = []
    report = patch_model(model, recording(stand_ins(), calls))
    line = capsys.readouterr().err.strip()
    assert line == report.line() and "\n" not in line and line.startswith("evo patch: ")
    assert set(report.served) == {"norm", "qkv", "attention", "o_proj", "gate_up", "down", "lm_head"}
    assert report.kept == {}
    assert rel(_logits(model, ids), ref) < 1e-5
    assert [role for role, _ in calls] == LAYER_ROLES * 2 + ["norm", "lm_head"]
    calls.clear()
    assert torch.equal(_generate(model, ids, cache_implementation="static"), tokens)
    # prefill then 2 decode steps; a static cache's decode steps have a mask, so attention runs SDPA there
    assert sum(role == "attention" for role, _ in calls) == 2
    assert sum(role == "qkv" for role, _ in calls) == 3 * 2


@pytest.mark.parametrize("family", ["llama", "phi3"])
def test_unpatch_restores_the_model_bit_for_bit(family):
    model = tiny_model(family)
    ids = prompt()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ref, tokens = _logits(model, ids), _generate(model, ids)
    buffers = {name for name, _ in model.named_buffers()}
    patch_model(model, stand_ins(), quiet=True)
    assert model.config._attn_implementation == "evo"
    assert {name for name, _ in model.named_buffers()} > buffers  # the transposed weights
    assert set(model.state_dict()) == set(state)  # not persistent: never saved
    assert unpatch_model(model) is model
    assert model.config._attn_implementation == "sdpa"
    assert {name for name, _ in model.named_buffers()} == buffers
    assert not any("forward" in m.__dict__ or "_evo_roles" in m.__dict__ for m in model.modules())
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert torch.equal(_logits(model, ids), ref) and torch.equal(_generate(model, ids), tokens)


def test_a_dynamic_cache_runs_the_zoo_s_attention_in_every_step():
    model = tiny_model("llama")
    ids = prompt()
    tokens = _generate(model, ids)
    calls: list = []
    patch_model(model, recording(stand_ins(), calls), quiet=True)
    assert torch.equal(_generate(model, ids), tokens)
    shapes = [(args[0].shape[2], args[1].shape[2]) for role, args in calls if role == "attention"]
    assert shapes == [(4, 4)] * 2 + [(1, 5)] * 2 + [(1, 6)] * 2  # q_len, kv_len: prefill, then each step's cache


def test_padding_makes_a_mask_and_sdpa_runs_the_attention():
    model = tiny_model("llama")
    ids = prompt(batch=2)
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    ref = _logits(model, ids, attention_mask=mask)
    calls: list = []
    patch_model(model, recording(stand_ins(), calls), quiet=True)
    out = _logits(model, ids, attention_mask=mask)
    assert rel(out[1], ref[1]) < 1e-5 and rel(out[0, 2:], ref[0, 2:]) < 1e-5
    assert "attention" not in {role for role, _ in calls} and "qkv" in {role for role, _ in calls}


@pytest.mark.parametrize("role, wrong", [
    ("gate_up", lambda a, b: torch.nn.functional.silu(a @ b[:, b.shape[1] // 2:]) * (a @ b[:, :b.shape[1] // 2])),
    ("o_proj", lambda a, b, residual: a @ b),  # the residual dropped
    ("qkv", lambda a, b: torch.cat((a @ b[:, 64:96], a @ b[:, :64], a @ b[:, 96:]), dim=-1)),  # k where q goes
    ("norm", lambda x, weight, eps: (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))),  # no weight
    ("attention", lambda q, k, v, scale=None: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, enable_gqa=True)),  # no causal mask
], ids=["gate_up-halves-swapped", "o_proj-no-residual", "qkv-q-and-k-swapped", "norm-no-weight", "not-causal"])
def test_the_logits_check_catches_a_wrong_op(role, wrong):
    model = tiny_model("llama")
    ids = prompt()
    ref = _logits(model, ids)
    ops = stand_ins()
    patch_model(model, ops, quiet=True)
    right = rel(_logits(model, ids), ref)
    patch_model(model, {**ops, role: wrong}, quiet=True)
    bad = rel(_logits(model, ids), ref)
    assert right < 1e-5 and bad > 1e-3, (right, bad)


def test_token_counts_the_zoo_did_not_measure_run_torch(monkeypatch):
    model = tiny_model("mistral")
    ids = prompt()
    tokens = _generate(model, ids)
    d = 16  # the tiny zoo's shapes at T = 1 only: a decode zoo
    shapes = {"norm": [(1, 64)], "qkv": [(1, 128, 64)], "attention": [(1, 4, 2, 1, 4097, d)],
              "o_proj": [(1, 64, 64)], "gate_up": [(1, 128, 64)], "down": [(1, 64, 128)], "lm_head": [(1, 256, 64)]}
    ops = {r: measured_as(op, shapes[r], "fp32", monkeypatch) for r, op in stand_ins().items()}
    calls: list = []
    report = patch_model(model, recording(ops, calls), quiet=True)
    assert all(tokens == (1,) for _, tokens in report.served.values())
    assert "at T=1 (other token counts run torch)" in report.line()
    _logits(model, ids)  # a prefill of 4 tokens: every role but lm_head on torch (generate's lm_head sees 1 row)
    assert calls == []
    assert torch.equal(_generate(model, ids), tokens)
    assert [role for role, _ in calls[:len(LAYER_ROLES)]] == ["lm_head"] + LAYER_ROLES[:-1]  # prefill's last row


def test_the_decode_plan_s_linear_roles_serve_decode_and_gemm_roles_prefill(monkeypatch):
    """evo zoo's plan: linear_* roles (norms fused, nn.Linear's weights) for T <= 16, gemm roles above."""
    model = tiny_model("llama")
    ids = prompt()
    ref, tokens = _logits(model, ids), _generate(model, ids)
    gemm, linear = stand_ins(), stand_ins("linear", fused_norm=True)
    sizes = {"norm": (64,), "qkv": (128, 64), "o_proj": (64, 64), "gate_up": (128, 64), "down": (64, 128),
             "lm_head": (256, 64)}
    ops = {f"linear_{r}": measured_as(linear[r], [(1, *sizes[r])], "fp32", monkeypatch)
           for r in ("qkv", "o_proj", "gate_up", "down")}
    ops["linear_lm_head"] = measured_as(named(gemm_stand_in("linear+rmsnorm"), "linear+rmsnorm"),
                                        [(1, *sizes["lm_head"])], "fp32", monkeypatch)
    ops["rope"] = lambda *args: None
    ops.update({r: measured_as(op, [(4, *sizes[r])], "fp32", monkeypatch) for r, op in gemm.items() if r in sizes})
    ops["attention"] = gemm["attention"]
    calls: list = []
    report = patch_model(model, recording(ops, calls), quiet=True)
    assert report.served["linear_qkv"] == ("linear+rmsnorm", (1,)) and report.served["qkv"] == ("gemm", (4,))
    assert report.kept["linear_lm_head"].startswith("its prologue norm is the final norm")
    assert report.kept["rope"].startswith("transformers' own RoPE and cache update")
    layer = model.model.layers[0]
    assert layer.evo_qkv.shape == (64, 128) and layer.evo_qkv_nk.shape == (128, 64)  # gemm's W^T, linear's W
    assert rel(_logits(model, ids), ref) < 1e-5
    assert [role for role, _ in calls] == ["norm", "qkv", "attention", "o_proj", "norm", "gate_up", "down"] * 2 \
        + ["norm", "lm_head"]
    calls.clear()
    assert torch.equal(_generate(model, ids), tokens)
    step = [role for role, _ in calls][-5:]  # the last decode step: the norms fused, lm_head's left to torch
    assert step == ["linear_qkv", "attention", "linear_o_proj", "linear_gate_up", "linear_down"]


def test_a_zoo_of_another_model_or_dtype_keeps_torch_and_says_why(monkeypatch):
    model = tiny_model("qwen2")
    ops = stand_ins()
    other = {"qkv": measured_as(ops["qkv"], [(1, 3072, 1024)], "fp32", monkeypatch),
             "down": measured_as(ops["down"], [(1, 64, 128)], "bf16", monkeypatch),
             "sampling_softmax": ops["norm"], "norm": ops["norm"]}
    report = patch_model(model, other, quiet=True)
    assert set(report.served) == {"norm"}
    assert report.kept["qkv"] == "its kernels are for 3072x1024, this model's is 128x64"
    assert report.kept["down"] == "its kernels are bf16, the model is fp32"
    assert report.kept["sampling_softmax"] == "transformers samples in its own code"
    assert report.kept["attention"] == "no kernel in the zoo"
    assert "torch keeps qkv (its kernels are for 3072x1024, this model's is 128x64)" in report.line()
    assert not hasattr(model.model.layers[0], "evo_qkv")


def test_gemm_weights_are_copied_once_transposed_and_merged():
    model = tiny_model("qwen2")
    calls: list = []
    report = patch_model(model, recording(stand_ins(), calls), quiet=True)
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    merged = torch.cat((attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight)).t()
    assert layer.evo_qkv.is_contiguous() and torch.equal(layer.evo_qkv, merged)
    assert torch.equal(layer.evo_qkv_bias, torch.cat((attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias)))
    assert torch.equal(layer.evo_gate_up, torch.cat((mlp.gate_proj.weight, mlp.up_proj.weight)).t())
    assert torch.equal(layer.evo_o_proj, attn.o_proj.weight.t())
    assert torch.equal(layer.evo_down, mlp.down_proj.weight.t())
    per_layer = sum(getattr(layer, f"evo_{r}").numel() for r in ("qkv", "o_proj", "gate_up", "down")) * 4
    assert report.copied_bytes == 2 * per_layer + 256 * 64 * 4  # two layers and the lm_head
    _logits(model, prompt())
    _logits(model, prompt(3))
    qkv = [args for role, args in calls if role == "qkv"]
    assert qkv[0][1] is layer.evo_qkv and qkv[2][1] is layer.evo_qkv  # the same buffer every call
    # gemm takes no bias: Qwen2's Q, K and V biases are added after it; gemm+bias takes them as its operand
    assert len(qkv[0]) == 2
    model2 = tiny_model("qwen2")
    ops = stand_ins()
    ref = _logits(model2, prompt())
    for name in ("gemm+bias", "linear+bias", "linear+rmsnorm+bias"):  # the bias as the op's operand
        calls.clear()
        patch_model(model2, recording({**ops, "qkv": _with_operator(name)}, calls), quiet=True)
        assert rel(_logits(model2, prompt()), ref) < 1e-5, name
        args = next(a for role, a in calls if role == "qkv")
        assert args[3 if "rmsnorm" in name else 2] is model2.model.layers[0].evo_qkv_bias, name


def _with_operator(name):
    """A stand-in of operator `name` (one the default stand-ins do not use)."""
    return named(gemm_stand_in(name), name)


@pytest.mark.parametrize("family", ["llama", "phi3"])
@pytest.mark.parametrize("fused_norm", [False, True], ids=["linear", "linear+rmsnorm"])
def test_linear_ops_read_nn_linear_weights_in_place(family, fused_norm):
    model = tiny_model(family)
    ids = prompt()
    ref = _logits(model, ids)
    calls: list = []
    report = patch_model(model, recording(stand_ins("linear", fused_norm), calls), quiet=True)
    assert rel(_logits(model, ids), ref) < 1e-5
    layer = model.model.layers[0]
    by_role = {}
    for role, args in calls:
        by_role.setdefault(role, args)
    assert by_role["o_proj"][1] is layer.self_attn.o_proj.weight and by_role["down"][1] is layer.mlp.down_proj.weight
    assert by_role["lm_head"][1] is model.lm_head.weight
    if family == "phi3":  # its own merged projections: nothing copied at all
        assert report.copied_bytes == 0 and by_role["qkv"][1] is layer.self_attn.qkv_proj.weight
    else:  # q, k, v and gate, up concatenated once, in nn.Linear's [N, K] layout
        assert torch.equal(layer.evo_qkv_nk, torch.cat((layer.self_attn.q_proj.weight, layer.self_attn.k_proj.weight,
                                                     layer.self_attn.v_proj.weight)))
        assert report.copied_bytes == 2 * (layer.evo_qkv_nk.numel() + layer.evo_gate_up_nk.numel()) * 4
    norms = [role for role, _ in calls].count("norm")
    assert norms == (1 if fused_norm else 5)  # a fused norm: only the final one runs alone


def test_refusals_name_the_problem_and_change_nothing():
    tf = pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="takes a transformers model; got Linear"):
        patch_model(torch.nn.Linear(2, 2), stand_ins())
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64))
    with pytest.raises(ValueError, match="serves the llama, qwen2, qwen3, mistral, phi3 families and the attention of "
                                         "gemma2; GPT2LMHeadModel is 'gpt2'"):
        patch_model(gpt2, stand_ins())
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="the op for role 'down' is not callable"):
        patch_model(model, {**stand_ins(), "down": "down.py"})
    assert not any("forward" in m.__dict__ for m in model.modules()) and model.config._attn_implementation == "sdpa"
    report = patch_model(model, {"qkv": _with_operator("gemm+residual")}, quiet=True)
    assert report.kept["qkv"] == "its operator gemm+residual cannot serve it" and report.served == {}


def test_patching_twice_is_one_patch():
    model = tiny_model("llama")
    ids = prompt()
    ref = _logits(model, ids)
    patch_model(model, stand_ins(), quiet=True)
    report = patch_model(model, {"norm": stand_ins()["norm"]}, quiet=True)
    assert set(report.served) == {"norm"} and not hasattr(model.model.layers[0], "evo_qkv")
    assert rel(_logits(model, ids), ref) < 1e-5
