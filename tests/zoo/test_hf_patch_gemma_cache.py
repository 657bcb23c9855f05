"""patch_model on a tiny Gemma-2 model with a static cache: its decode steps, which pass a boolean mask (causal over the
cache, and on the sliding layer its window), run the zoo's `cache_attention+softcap<cap>` op on every layer where the
call caps at that cap, and generate() as unpatched (its scores too, the prefill's among them: a prefill into an empty
static cache, which transformers passes without a mask, runs eager attention over the prompt's keys only); an op of
another cap, or without one, never runs there."""

from __future__ import annotations

import torch

import operators
from evo.zoo.hf_patch import patch_model, unpatch_model
from tests.zoo._hf_models import named, prompt, rel
from tests.zoo.test_hf_patch_gemma import CAP, WINDOW, tiny_gemma2


def _cached_op(name: str, calls: list) -> object:
    op = operators.get(name)

    def attention(q, k, v, mask, scale=None):
        assert mask.dtype == torch.bool and tuple(mask.shape) == (q.shape[0], 1, q.shape[2], k.shape[2])
        calls.append((name, q.shape[2], int(mask[0, 0, -1].sum())))
        return op.reference(q, k, v, mask, scale).to(q.dtype)

    return named(attention, name)


def _generate(model, ids):
    out = model.generate(ids, max_new_tokens=4, do_sample=False, cache_implementation="static",
                         return_dict_in_generate=True, output_scores=True)
    return out.sequences, torch.stack(out.scores)


def test_the_decode_steps_run_the_capped_cache_op_on_every_layer():
    model = tiny_gemma2()
    ids = prompt(8)  # a prompt past the window of 6: the sliding layer's mask hides keys
    tokens, scores = _generate(model, ids)
    calls: list = []
    report = patch_model(model, {"cache_attention": _cached_op(f"cache_attention+softcap{CAP:g}", calls)},
                         quiet=True)
    assert set(report.served) == {"cache_attention"}
    got_tokens, got_scores = _generate(model, ids)
    assert torch.equal(got_tokens, tokens) and rel(got_scores, scores) < 1e-5
    decode = [c for c in calls if c[1] == 1]
    assert len(decode) == 2 * 3  # two layers, three decode steps (the first token comes from the prefill)
    seen = sorted({c[2] for c in decode})
    assert WINDOW in seen and max(seen) > WINDOW  # the sliding layer's mask keeps its window, the global's every key
    unpatch_model(model)


def test_an_op_of_another_cap_or_none_never_runs():
    model = tiny_gemma2()
    ids = prompt(4)
    tokens, scores = _generate(model, ids)
    for name in ("cache_attention+softcap50", "cache_attention"):
        calls: list = []
        patch_model(model, {"cache_attention": _cached_op(name, calls)}, quiet=True)
        got_tokens, got_scores = _generate(model, ids)
        assert calls == [] and torch.equal(got_tokens, tokens) and rel(got_scores, scores) < 1e-6, name
        unpatch_model(model)
