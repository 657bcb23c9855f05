"""patch_model on a tiny Gemma-2 model (evo.zoo.hf_patch ATTENTION_ONLY): its attention runs the zoo's
`attention+causal+softcap<cap>` op (and the window variant on its sliding layers) where the call needs no mask, every
other call the family's eager attention; the layers keep their own forward, the report says so; logits and greedy
generation as unpatched; an op of another cap never runs; unpatching restores the model."""

from __future__ import annotations

import pytest
import torch

import operators
from evo.zoo.hf_patch import patch_model, unpatch_model
from tests.zoo._hf_models import INIT, SIZES, named, prompt, rel

CAP, WINDOW = 0.5, 6  # a cap the tiny model's logits reach, a window shorter than the longer prompt


def tiny_gemma2(seed: int = 0) -> torch.nn.Module:
    tf = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = tf.Gemma2Config(**{**SIZES, "head_dim": 16, "query_pre_attn_scalar": 16, "attn_logit_softcapping": CAP,
                                "final_logit_softcapping": 30.0, "sliding_window": WINDOW, "initializer_range": INIT,
                                "attn_implementation": "eager"})
    model = tf.Gemma2ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape) * INIT)  # Gemma scales by 1 + weight
    return model


def _op(name: str, calls: list) -> object:
    op = operators.get(name)

    def attention(q, k, v, scale=None):
        assert scale is None or abs(scale - q.shape[-1] ** -0.5) < 1e-12  # the reference's scale
        calls.append((name, q.shape[2], k.shape[2]))
        return op.reference(q, k, v).to(q.dtype)

    return named(attention, name)


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


def test_gemma2_attention_runs_the_zoo_s_variants_where_they_are_exact(capsys):
    model = tiny_gemma2()
    short, long = prompt(4), prompt(10)
    refs = [_logits(model, ids) for ids in (short, long)]
    tokens = model.generate(short, max_new_tokens=4, do_sample=False)
    calls: list = []
    ops = {"attention": _op("attention+causal+softcap0.5", calls),
           "attention_local": _op(f"attention+causal+softcap0.5+window{WINDOW}", calls),
           "linear_gate_up": named(lambda *a: None, "linear+rmsnorm+geglu")}
    report = patch_model(model, ops)
    assert "\n" not in capsys.readouterr().err.strip()
    assert set(report.served) == {"attention", "attention_local"}
    assert "keep their own forward" in report.kept["linear_gate_up"]
    assert rel(_logits(model, short), refs[0]) < 1e-5
    # 4 tokens: no mask in either layer; the first op that fits serves both (the window hides no key)
    assert [c[1:] for c in calls] == [(4, 4), (4, 4)]
    calls.clear()
    assert rel(_logits(model, long), refs[1]) < 1e-5
    # 10 tokens past the window of 6: the sliding layer has a mask (eager runs it), the global layer the capped op
    assert calls == [("attention+causal+softcap0.5", 10, 10)]
    calls.clear()
    assert torch.equal(model.generate(short, max_new_tokens=4, do_sample=False), tokens)
    assert calls  # the decode steps' global layers ran the op
    unpatch_model(model)
    assert model.config._attn_implementation == "eager" and rel(_logits(model, long), refs[1]) == 0.0


def test_an_op_of_another_cap_never_runs_and_a_wrong_op_would_show():
    model = tiny_gemma2()
    ids = prompt(4)
    ref = _logits(model, ids)
    calls: list = []
    patch_model(model, {"attention": _op("attention+causal+softcap50", calls)}, quiet=True)
    assert rel(_logits(model, ids), ref) < 1e-5 and calls == []  # the call caps at 0.5: eager ran it
    unpatch_model(model)
    wrong = operators.get("attention+causal+softcap50")  # what running it there would have given

    def forced(q, k, v, scale=None):
        return wrong.reference(q, k, v).to(q.dtype)

    patch_model(model, {"attention": named(forced, "attention+causal+softcap0.5")}, quiet=True)
    assert rel(_logits(model, ids), ref) > 1e-3


def test_the_window_variant_serves_the_sliding_layers_only():
    model = tiny_gemma2()
    ids = prompt(4)
    ref = _logits(model, ids)
    calls: list = []
    patch_model(model, {"attention_local": _op(f"attention+causal+softcap0.5+window{WINDOW}", calls)}, quiet=True)
    assert rel(_logits(model, ids), ref) < 1e-5
    assert len(calls) == 1  # layer 0 (sliding); layer 1 sees every key: a window there is not its attention
