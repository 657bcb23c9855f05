"""Attention with a model's logit cap and sliding window as operator variants (`attention+causal+softcap50`,
`attention+causal+window4096`, Gemma 2's): the names, the problems' flops, the rule keeping them off Gluon, a rendered
module run in the interpreter against the reference, the export's self-check and the eager baseline."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import operators
from evo.problem import HOPPER
from genomes.attention_gluon import GLUON_FIXED
from operators.attention.model_baselines import model_baselines, visible_keys
from operators.attention.operator import visible_pairs

SMALL_GPU = dataclasses.replace(HOPPER, num_sms=3)


def _rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def test_names_carry_the_values_in_one_spelling():
    op = operators.get("attention+causal+softcap50+window4096")
    assert (op.causal, op.softcap, op.window) == (True, 50.0, 4096)
    assert operators.get("attention+softcap2.5").softcap == 2.5
    assert operators.get("attention+causal+window17").window == 17


@pytest.mark.parametrize("name, words", [
    ("attention+softcap", "softcap50"), ("attention+softcap50.0", "write it softcap50"),
    ("attention+softcap-3", "positive"), ("attention+causal+window40.5", "positive int"),
    ("attention+window4096", "needs the causal mask"), ("attention+causal+window8+softcap50", "in that order"),
    ("attention+causal+causal", "each once"), ("attention+causal+windowx", "window4096"),
])
def test_bad_names_are_one_line(name, words):
    with pytest.raises(ValueError, match=words) as e:
        operators.get(name)
    assert "\n" not in str(e.value)


def test_a_window_counts_only_the_pairs_it_keeps():
    for n_q, n_k, window in ((1, 100, 16), (37, 70, 20), (70, 70, 4096), (300, 300, 7), (5, 9, 1)):
        assert visible_pairs(n_q, n_k, True, window) == int(visible_keys(n_q, n_k, True, window).sum())
    op = operators.get("attention+causal+window64")
    full = operators.get("attention+causal")
    sizes = (1, 8, 4, 512, 512, 64)
    assert op.flops(op.problem(sizes, "bf16")) < full.flops(full.problem(sizes, "bf16")) / 4


def test_gluon_is_ruled_out_with_its_reason_and_repaired_to_triton():
    op = operators.get("attention+causal+softcap50")
    problem = op.problem((1, 8, 8, 2048, 2048, 128), "bf16")
    gluon = op.family.make(op.family.base(**GLUON_FIXED, backend="gluon", BLOCK_M=64, BLOCK_N=128, num_warps=4,
                                          num_stages=2, consumers=2, overlap=True))
    assert any("switches of the Triton kernel only" in r for r in op.family.violations(gluon, problem, HOPPER))
    plain = operators.get("attention+causal")
    assert plain.family.violations(gluon, plain.problem(problem.sizes, "bf16"), HOPPER) == []
    repaired = op.family.repair(gluon, problem, HOPPER, __import__("numpy").random.default_rng(0))
    assert repaired.as_dict()["backend"] == "triton" and op.family.violations(repaired, problem, HOPPER) == []
    assert all(s.as_dict()["backend"] == "triton" for s in op.family.seeds(problem, HOPPER))


@pytest.mark.parametrize("name, genes", [
    ("attention+causal+softcap50+window24", {}),
    ("attention+causal+softcap3+window24", {"pack_gqa": True, "kv_split": 4, "reduce": "last_program"}),
    ("attention+causal+window9", {"mask_loop": "masked", "kv_load": "tma"}),
    ("attention+softcap2", {"persistent": 1}),
])
def test_rendered_modules_match_the_reference_in_the_interpreter(name, genes, monkeypatch, tmp_path):
    """The module evo renders for the variant (its CONFIG holding the cap and the window) against the reference."""
    import importlib.util

    op = operators.get(name)
    problem = op.problem((2, 4, 2, 37, 70, 32), "fp16")
    genome = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=16, num_warps=2, num_stages=2, **genes))
    assert op.family.violations(genome, problem, SMALL_GPU) == []
    text = op.render(genome, problem, SMALL_GPU)
    assert f"'SOFTCAP': {op.softcap!r}" in text and f"'WINDOW': {op.window!r}" in text
    path = tmp_path / "attention_variant.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("attention_variant", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    q, k, v = op.make_inputs(problem, seed=5, device="cpu")
    ref = op.reference(q, k, v)
    out = module.attention(q, k, v)
    assert _rel(out, ref) < op.tolerance(problem)
    plain = operators.get("attention+causal" if op.causal else "attention").reference(q, k, v)
    assert _rel(plain, ref) > 100 * op.tolerance(problem)  # the cap or the window shows
    # fp32 inputs through the same plan (the interpreter's other dtype)
    q32, k32, v32 = (t.float() for t in (q, k, v))
    assert _rel(module.attention(q32, k32, v32, scale=0.1), _formula(q32, k32, v32, op, 0.1)) < 1e-4


def _formula(q, k, v, op, scale):
    group = q.shape[1] // k.shape[1]
    s = q @ k.repeat_interleave(group, 1).transpose(-1, -2) * scale
    if op.softcap:
        s = op.softcap * torch.tanh(s / op.softcap)
    seen = visible_keys(q.shape[2], k.shape[2], op.causal, op.window)
    return torch.softmax(s.masked_fill(~seen, float("-inf")), -1) @ v.repeat_interleave(group, 1)


@pytest.mark.parametrize("name", ["attention+causal+softcap50+window24", "attention+causal+window9",
                                  "attention+softcap3"])
def test_self_check_and_eager_baseline_compute_the_variant(name):
    op = operators.get(name)
    problem = op.problem((1, 4, 2, 33, 64, 16), "fp16")
    q, k, v = op.make_inputs(problem, seed=1, device="cpu")
    ref = op.reference(q, k, v)
    space: dict = {}
    exec(op.selfcheck_source(problem), space)  # noqa: S102 - the text evo writes into an export
    assert _rel(space["selfcheck_reference"](q, k, v), ref) < 1e-5
    assert _rel(space["selfcheck_baseline"](q, k, v), ref) < op.tolerance(problem)
    assert [a.shape for a in space["selfcheck_inputs"]("cpu")] == [q.shape, k.shape, v.shape]
    eager = op.bench_baselines()[[b.name for b in op.bench_baselines()].index("eager")].make(problem)
    assert _rel(eager(q, k, v), ref) < op.tolerance(problem)
    assert _rel(eager(q, k, v, scale=0.5), ref) > op.tolerance(problem)  # the scale is taken


def test_baselines_name_the_eager_path_first_where_sdpa_cannot_cap():
    assert [b.name for b in model_baselines(True, 50.0, 4096)] == ["eager", "torch_compile", "flex_attention"]
    assert [b.name for b in model_baselines(True, 0.0, 4096)][0] == "sdpa"
    assert [b.name for b in operators.get("attention+causal+softcap50").baselines()] == ["eager"]
    assert math.isclose(operators.get("attention+causal+softcap30").softcap, 30.0)
