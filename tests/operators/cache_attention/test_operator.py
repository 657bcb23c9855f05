"""cache_attention in Triton's interpreter: every seed and random genomes against the exact reference (grouped heads,
several queries, a split with its last-arriving reduction, empty blocks skipped or read), any mask (padding, a sliding
window, a row with no key), q and the cache read in place through their strides, repeated calls bit-identical with the
arrival counters back at zero, one line for bad input, the baselines against the reference, and the kernel compiling
for Hopper without a GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from tests.operators.hopper_compile import compile_for_hopper

os.environ.setdefault("TRITON_INTERPRET", "1")

OP = operators.get("cache_attention")


def _module(genes: dict, sizes: tuple[int, ...], dtype: str = "fp16"):
    p = OP.problem(sizes, dtype)
    g = OP.family.make({**OP.family.base(), **genes})
    return load_source(OP.render(g, p, HOPPER)), p


def _rel(y, ref) -> float:
    return float((y.float() - ref.float()).norm() / ref.float().norm())


@pytest.mark.parametrize("sizes", [(1, 8, 2, 1, 100, 64), (2, 4, 4, 3, 70, 32), (1, 8, 2, 16, 200, 64),
                                   (1, 6, 2, 2, 50, 40)])
def test_seeds_and_random_genomes_match_the_reference(sizes):
    p = OP.problem(sizes, "fp16")
    rng = np.random.default_rng(7)
    genomes = OP.family.seeds(p, HOPPER)[:4] + [OP.family.random(rng, p, HOPPER) for _ in range(3)]
    inputs = OP.make_inputs(p, 3, "cpu")
    ref = OP.reference(*inputs)
    for g in genomes:
        out = load_source(OP.render(g, p, HOPPER)).cache_attention(*inputs)
        assert out.shape == ref.shape and _rel(out, ref) < OP.tolerance(p), g


@pytest.mark.parametrize("genes", [dict(SPLITS=1, skip_masked=True), dict(SPLITS=4, BLOCK_N=16, skip_masked=True),
                                   dict(SPLITS=2, skip_masked=False)])
def test_any_mask_strided_inputs_and_a_row_with_no_key(genes):
    mod, _ = _module(genes, (1, 8, 2, 3, 96, 32))
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 3, 8, 32, generator=gen).half().transpose(1, 2)  # [B, H, T, D] as a transposed view
    cache = torch.randn(2, 1, 2, 128, 32, generator=gen).half()  # a larger cache; k and v are slices of it
    k, v = cache[0, :, :, :96], cache[1, :, :, :96]
    mask = torch.rand(1, 1, 3, 96, generator=gen) < 0.3  # padding-like holes anywhere
    mask[0, 0, 1] = False  # a query with no key: zeros
    mask[0, 0, 2, :40] = False  # a sliding window
    out = mod.cache_attention(q, k, v, mask, 0.2)
    ref = OP.reference(q, k, v, mask, 0.2)
    assert torch.all(out[0, 1] == 0) and _rel(out, ref) < 2e-3


def test_repeated_calls_are_identical_and_leave_the_counters_at_zero():
    mod, p = _module(dict(SPLITS=8, BLOCK_N=16), (1, 8, 2, 1, 300, 64))
    inputs = OP.make_inputs(p, 1, "cpu")
    first, second = mod.cache_attention(*inputs), mod.cache_attention(*inputs)
    assert torch.equal(first, second)
    (run,) = mod._PLANS.values()
    assert run.workspace is not None and int(run.workspace[2].abs().sum()) == 0


def test_out_is_written_in_place():
    mod, p = _module({}, (1, 4, 2, 2, 40, 16))
    inputs = OP.make_inputs(p, 2, "cpu")
    out = torch.empty(1, 2, 4, 16, dtype=torch.float16)
    assert mod.cache_attention(*inputs, out=out) is out and _rel(out, OP.reference(*inputs)) < 2e-3


@pytest.mark.parametrize("bad, message", [
    (lambda q, k, v, m: (q[0], k, v, m), "q must be"),
    (lambda q, k, v, m: (q, k.float(), v, m), "k must be"),
    (lambda q, k, v, m: (q, k, v[:, :, :10], m), "one shape"),
    (lambda q, k, v, m: (q, k, v, m.half()), "mask must be a bool"),
    (lambda q, k, v, m: (q, k[:, :1].expand(1, 3, 40, 16), v[:, :1].expand(1, 3, 40, 16), m), "multiple"),
])
def test_bad_input_is_one_line_naming_it(bad, message):
    mod, p = _module({}, (1, 4, 2, 2, 40, 16))
    with pytest.raises(ValueError, match=message) as e:
        mod.cache_attention(*bad(*OP.make_inputs(p, 2, "cpu")))
    assert "\n" not in str(e.value)


def test_problems_refuse_heads_that_do_not_group():
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        OP.problem((1, 6, 4, 1, 100, 64), "bf16")
    with pytest.raises(ValueError, match="exceeds the cache"):
        OP.problem((1, 8, 2, 200, 100, 64), "bf16")


def test_the_baselines_compute_the_reference():
    p = OP.problem((1, 8, 2, 2, 64, 32), "fp16")
    inputs = tuple(t.float() if t.dtype != torch.bool else t for t in OP.make_inputs(p, 5, "cpu"))
    ref = OP.reference(*inputs)
    for b in OP.baselines() + [b for b in OP.bench_baselines() if b.name == "sdpa_gqa"]:
        assert _rel(b.make(p)(*inputs), ref) < 1e-5, b.name


@pytest.mark.slow
def test_every_structure_compiles_for_hopper(tmp_path):
    cases = [("cache_attention", genes, sizes, "bf16") for genes, sizes in (
        (dict(BLOCK_N=64, SPLITS=16, num_stages=2), (1, 32, 8, 1, 4097, 128)),
        (dict(BLOCK_N=128, SPLITS=1, num_warps=8, num_stages=3, skip_masked=False), (1, 32, 8, 16, 4112, 128)),
        (dict(BLOCK_N=32, SPLITS=32, num_warps=2, num_stages=3), (1, 32, 8, 1, 2177, 64)),
        (dict(BLOCK_N=32, SPLITS=8, num_warps=8, num_stages=2), (1, 28, 4, 16, 4112, 128)))]
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    bad = [r for r in results if r["status"] != "ok" or r.get("spills")]
    assert len(results) == len(cases) and not bad, bad
