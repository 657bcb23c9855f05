"""`cache_attention+softcap<cap>` (issue 45, item 2: Gemma 2's decode step over a static cache, its logits capped):
the name and its refusals, the kernel's SOFTCAP switch against the capped reference in Triton's interpreter (fp16:
seeds, random genomes, a split with its last-arriving reduction, any mask: a sliding window is the mask's), the cap
seen (the uncapped result is far), the contenders (transformers' Gemma-2 eager path, torch.compile of it and
FlexAttention; SDPA cannot cap), the export's self-check, and the capped kernel compiling for Hopper like the plain
one."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from operators.cache_attention import CacheAttentionOperator
from tests.operators.hopper_compile import compile_for_hopper

os.environ.setdefault("TRITON_INTERPRET", "1")

CAPPED = operators.get("cache_attention+softcap2")  # a cap that bites at unit-scale scores
PLAIN = operators.get("cache_attention")


def _rel(y, ref) -> float:
    return float((y.float() - ref.float()).norm() / ref.float().norm())


def _module(op, genes: dict, sizes: tuple[int, ...], dtype: str = "fp16"):
    p = op.problem(sizes, dtype)
    g = op.family.make({**op.family.base(), **genes})
    return load_source(op.render(g, p, HOPPER)), p


# -- the name ---------------------------------------------------------------------------------------------------
def test_the_name_carries_the_cap():
    op = operators.get("cache_attention+softcap50")
    assert isinstance(op, CacheAttentionOperator) and op.name == "cache_attention+softcap50" and op.softcap == 50.0
    assert operators.get("cache_attention+softcap30.5").softcap == 30.5
    assert PLAIN.softcap == 0.0 and op.torch_schema == PLAIN.torch_schema and op.dims == PLAIN.dims
    assert op.problem((1, 16, 8, 1, 4097, 256), "bf16").key == "cache_attention+softcap50:1x16x8x1x4097x256:bf16"


@pytest.mark.parametrize("name, message", [
    ("cache_attention+softcap50.0", "write the cap cache_attention\\+softcap50"),
    ("cache_attention+softcap0", "a positive number up to 1e6"),
    ("cache_attention+softcap-3", "a positive number"),
    ("cache_attention+softcapnan", "a positive number"),
    ("cache_attention+softcap2e6", "up to 1e6"),
    ("cache_attention+causal", "takes one option, softcap<cap>"),
    ("cache_attention+softcap50+softcap30", "takes one option"),
    ("cache_attention+window4096", "takes one option"),
])
def test_bad_names_are_one_line(name, message):
    with pytest.raises(ValueError, match=message) as e:
        operators.get(name)
    assert "\n" not in str(e.value)


def test_the_rendered_module_sets_the_switch():
    mod, _ = _module(operators.get("cache_attention+softcap50"), {}, (1, 8, 2, 1, 64, 32))
    assert mod.CONFIG["SOFTCAP"] == 50.0 and "logits capped at 50" in mod.__doc__
    plain, _ = _module(PLAIN, {}, (1, 8, 2, 1, 64, 32))
    assert plain.CONFIG["SOFTCAP"] == 0.0


# -- the kernel in the interpreter ------------------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [(1, 8, 2, 1, 100, 64), (1, 8, 2, 16, 200, 64), (1, 6, 2, 2, 50, 40)])
def test_seeds_and_random_genomes_match_the_capped_reference(sizes):
    p = CAPPED.problem(sizes, "fp16")
    rng = np.random.default_rng(5)
    genomes = CAPPED.family.seeds(p, HOPPER)[:3] + [CAPPED.family.random(rng, p, HOPPER) for _ in range(2)]
    q, k, v, mask = CAPPED.make_inputs(p, 3, "cpu")
    ref = CAPPED.reference(q, k, v, mask, 1.0)  # scores of about sqrt(D): the cap of 2 flattens them
    assert _rel(PLAIN.reference(q, k, v, mask, 1.0), ref) > 0.1  # the cap is seen
    for g in genomes:
        out = load_source(CAPPED.render(g, p, HOPPER)).cache_attention(q, k, v, mask, 1.0)
        assert out.shape == ref.shape and _rel(out, ref) < CAPPED.tolerance(p), g


@pytest.mark.parametrize("genes", [dict(SPLITS=1, skip_masked=True), dict(SPLITS=4, BLOCK_N=16, skip_masked=True),
                                   dict(SPLITS=2, skip_masked=False)])
def test_a_window_in_the_mask_strided_inputs_and_a_row_with_no_key(genes):
    mod, _ = _module(CAPPED, genes, (1, 8, 2, 3, 96, 32))
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 3, 8, 32, generator=gen).half().transpose(1, 2)
    cache = torch.randn(2, 1, 2, 128, 32, generator=gen).half()
    k, v = cache[0, :, :, :96], cache[1, :, :, :96]
    mask = torch.zeros(1, 1, 3, 96, dtype=torch.bool)
    mask[0, 0, 0, :94] = True  # a global layer's query: every key up to it
    mask[0, 0, 2, 60:96] = True  # a sliding layer's: the last 36 keys only
    out = mod.cache_attention(q, k, v, mask, 0.5)
    ref = CAPPED.reference(q, k, v, mask, 0.5)
    assert torch.all(out[0, 1] == 0) and _rel(out, ref) < 2e-3


def test_repeated_split_calls_are_identical():
    mod, p = _module(CAPPED, dict(SPLITS=8, BLOCK_N=16), (1, 8, 2, 1, 300, 64))
    inputs = CAPPED.make_inputs(p, 1, "cpu")
    first, second = mod.cache_attention(*inputs), mod.cache_attention(*inputs)
    assert torch.equal(first, second) and _rel(first, CAPPED.reference(*inputs)) < 2e-3
    (run,) = mod._PLANS.values()
    assert int(run.workspace[2].abs().sum()) == 0


# -- contenders and the self-check ------------------------------------------------------------------------------
def test_the_contenders_are_the_eager_path_its_compile_and_flex_attention():
    assert [b.name for b in CAPPED.bench_baselines()] == ["eager", "torch_compile", "flex_attention"]  # no SDPA
    assert "Gemma-2 eager" in CAPPED.baselines()[0].doc and "eager path" in CAPPED.tuner_baselines()[0].doc
    assert [b.name for b in PLAIN.bench_baselines()] == ["eager", "sdpa_gqa", "torch_compile"]
    p = CAPPED.problem((1, 8, 2, 2, 64, 32), "fp16")
    q, k, v, mask = (t.float() if t.dtype != torch.bool else t for t in CAPPED.make_inputs(p, 5, "cpu"))
    ref = CAPPED.reference(q, k, v, mask, 1.0)
    assert _rel(CAPPED.baselines()[0].make(p)(q, k, v, mask, 1.0), ref) < 1e-5
    assert _rel(PLAIN.baselines()[0].make(p)(q, k, v, mask, 1.0), ref) > 0.1


def test_flex_attention_computes_the_capped_reference_as_the_mask_changes(monkeypatch):
    """FlexAttention uncompiled (torch.compile of it takes ~20 s on this CPU; a GPU bench compiles it): the cap as a
    score_mod, the block mask made again when the mask changes in place (a decode step's next slot)."""
    pytest.importorskip("torch.nn.attention.flex_attention")
    monkeypatch.setattr(torch, "compile", lambda fn, **options: fn)
    (flex,) = [b for b in CAPPED.bench_baselines() if b.name == "flex_attention"]
    p = CAPPED.problem((1, 8, 2, 1, 64, 32), "fp16")
    q, k, v, mask = (t.float() if t.dtype != torch.bool else t for t in CAPPED.make_inputs(p, 5, "cpu"))
    fn = flex.make(p)
    assert _rel(fn(q, k, v, mask, 1.0), CAPPED.reference(q, k, v, mask, 1.0)) < 1e-5
    mask[0, 0, 0, 50:] = True  # the next slots written: the same tensor, a new version
    assert _rel(fn(q, k, v, mask, 1.0), CAPPED.reference(q, k, v, mask, 1.0)) < 1e-5


def test_the_export_self_check_caps_and_the_kernel_passes_it():
    op = operators.get("cache_attention+softcap50")
    p = op.problem((1, 8, 2, 1, 64, 32), "fp16")
    text = op.selfcheck_source(p)
    assert "SELFCHECK_SOFTCAP = 50.0" in text
    g = op.family.make(op.family.base())
    module = load_source(op.render(g, p, HOPPER) + "\n\n" + text)
    inputs = module.selfcheck_inputs("cpu")
    q = inputs[0] * 16  # scores past the cap of 50
    ref = module.selfcheck_reference(q, *inputs[1:])
    assert torch.equal(ref, op.reference(q, *inputs[1:]))
    assert _rel(ref, PLAIN.reference(q, *inputs[1:])) > 0.05
    assert _rel(module.cache_attention(q, *inputs[1:]), ref) < module.SELFCHECK_TOLERANCE
    assert _rel(module.selfcheck_baseline(q, *inputs[1:]), ref) < 1e-2  # fp16 eager: P rounded to the dtype


@pytest.mark.slow
def test_the_capped_kernel_compiles_for_hopper_as_the_plain_one(tmp_path):
    """Gemma-2-9B's decode step (16 heads over 8, head dim 256) with and without the cap: no spills either way."""
    sizes = (1, 16, 8, 1, 4097, 256)
    genes = [dict(BLOCK_N=64, SPLITS=16, num_stages=2), dict(BLOCK_N=32, SPLITS=8, num_warps=8, num_stages=2)]
    cases = [(name, g, sizes, "bf16") for g in genes for name in ("cache_attention+softcap50", "cache_attention")]
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    for r in results:
        print(f"{r['name']:26} {r['status']:6} registers {r['registers']} spills {r['spills']} shared {r['shared']}")
    assert len(results) == len(cases) and all(r["status"] == "ok" and not r["spills"] for r in results), results
