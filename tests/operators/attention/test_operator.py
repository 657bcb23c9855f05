"""Attention kernels in the Triton interpreter (fp16; bf16 arithmetic is broken there): every structure the genome
can render (packed GQA, split keys combined either way, both mask loops, both orders) against the fp32 reference,
at ragged lengths and a head dim that is not a power of two; strided inputs, the scale, bad arguments, the
export's self-check code, and the FLOP count of a bottom-right causal mask."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from operators.attention.operator import causal_pairs

CASES = [  # (operator, sizes, genes beyond the FlashAttention-2 base)
    ("attention", (2, 4, 2, 37, 53, 64), {}),
    ("attention", (1, 4, 1, 3, 200, 32), {"BLOCK_M": 16, "num_warps": 4, "pack_gqa": True, "kv_split": 4}),
    ("attention", (1, 4, 2, 1, 130, 80), {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "pack_gqa": True,
                                          "kv_split": 4, "reduce": "last_program"}),
    ("attention+causal", (1, 2, 2, 40, 40, 48), {"BLOCK_M": 32, "BLOCK_N": 16, "num_warps": 4}),
    ("attention+causal", (1, 2, 2, 40, 40, 64), {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 4, "mask_loop": "masked",
                                                 "q_order": "reverse", "grid": "heads_first"}),
    ("attention+causal", (1, 8, 2, 5, 70, 32), {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "pack_gqa": True,
                                                "kv_split": 8, "reduce": "last_program"}),
    # more splits than key blocks: the empty splits' partials weigh nothing
    ("attention+causal", (1, 2, 1, 3, 20, 16), {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "kv_split": 8}),
    # K and V through tensor descriptors: ragged key lengths and a padded head dim read as zeros
    ("attention+causal", (2, 4, 2, 29, 45, 40), {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "kv_load": "tma"}),
    ("attention", (1, 8, 2, 2, 150, 64), {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 2, "kv_load": "tma",
                                          "pack_gqa": True, "kv_split": 4, "reduce": "last_program"}),
    # persistent grids: a program loops over (tile, head, split) work items, here fewer programs than items
    ("attention+causal", (2, 4, 2, 50, 50, 32), {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2, "persistent": 1,
                                                 "q_order": "reverse", "grid": "heads_first"}),
    ("attention", (1, 4, 1, 1, 300, 32), {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 2, "persistent": 2,
                                          "pack_gqa": True, "kv_split": 4, "kv_load": "tma"}),
]
SMALL_GPU = dataclasses.replace(HOPPER, num_sms=3)  # a persistent grid smaller than the work

def _module(name, sizes, genes):
    op = operators.get(name)
    problem = op.problem(sizes, "fp16")
    genome = op.family.make(op.family.base(**genes))
    assert op.family.violations(genome, problem, SMALL_GPU) == []
    return op, problem, load_source(op.render(genome, problem, SMALL_GPU))

def _error(out, ref):
    return ((out.float() - ref).norm() / ref.norm()).item()

@pytest.mark.parametrize("name, sizes, genes", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES])
def test_a_rendered_kernel_matches_the_reference(name, sizes, genes):
    op, problem, module = _module(name, sizes, genes)
    inputs = op.make_inputs(problem, seed=7, device="cpu")
    ref = op.reference(*inputs)
    out = module.attention(*inputs)
    assert out.shape == ref.shape and out.dtype == torch.float16
    assert _error(out, ref) < op.tolerance(problem)
    again = module.attention(*op.make_inputs(problem, seed=8, device="cpu"))  # the plan (and its counters) reused
    assert _error(again, op.reference(*op.make_inputs(problem, seed=8, device="cpu"))) < op.tolerance(problem)

def test_a_wrong_mask_would_be_caught():
    """The reference and tolerance tell a causal kernel from a non-causal one on the same inputs."""
    op, problem, module = _module("attention", (1, 2, 2, 24, 24, 32), {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 2})
    causal = operators.get("attention+causal")
    inputs = op.make_inputs(problem, seed=1, device="cpu")
    assert _error(module.attention(*inputs), causal.reference(*inputs)) > 100 * causal.tolerance(problem)

def test_strided_inputs_the_scale_and_out():
    op, problem, module = _module("attention+causal", (2, 4, 2, 17, 33, 32), {"BLOCK_M": 16, "BLOCK_N": 16,
                                                                             "num_warps": 2, "pack_gqa": True})
    q, k, v = op.make_inputs(problem, seed=3, device="cpu")
    # [B, L, H, D] storage seen as [B, H, L, D], as models hold it; and one tensor with a strided head dim
    qs, ks = q.transpose(1, 2).contiguous().transpose(1, 2), k.transpose(1, 2).contiguous().transpose(1, 2)
    vs = torch.stack([v, v], dim=-1)[..., 0]
    assert not qs.is_contiguous() and vs.stride(-1) == 2
    out = torch.empty_like(q)
    got = module.attention(qs, ks, vs, out=out, scale=0.3)
    assert got is out
    ref = op.reference(q * (0.3 * math.sqrt(32)), k, v)  # the reference scales by 1/sqrt(D)
    assert _error(out, ref) < op.tolerance(problem)

@pytest.mark.parametrize("args, match", [
    (lambda q, k, v: (q[0], k, v), "non-empty 4-d tensor"),
    (lambda q, k, v: (q, k, v[:, :, :5]), "k and v must have one shape"),
    (lambda q, k, v: (q, k.half()[:, :1].expand(-1, 3, -1, -1), v[:, :1].expand(-1, 3, -1, -1)), "H dividing"),
    (lambda q, k, v: (q, k[:, :, :4], v[:, :, :4]), "no more queries than keys"),
])
def test_bad_arguments_are_named_in_one_line(args, match):
    op, problem, module = _module("attention+causal", (1, 4, 2, 8, 16, 16), {"BLOCK_M": 16, "BLOCK_N": 16,
                                                                            "num_warps": 2})
    with pytest.raises(ValueError, match=match):
        module.attention(*args(*op.make_inputs(problem, seed=0, device="cpu")))

def test_the_export_self_check_code_agrees_with_the_operator():
    for name, sizes in (("attention", (1, 4, 2, 3, 9, 16)), ("attention+causal", (1, 4, 2, 3, 9, 16)),
                        ("attention+causal", (1, 2, 2, 9, 9, 16))):
        op = operators.get(name)
        problem = op.problem(sizes, "fp16")
        check = load_source(op.selfcheck_source(problem))
        inputs = tuple(t.float() for t in check.selfcheck_inputs("cpu"))
        assert check.problem_sizes(*inputs) == sizes
        ref = check.selfcheck_reference(*inputs)
        assert torch.allclose(ref, op.reference(*inputs), atol=1e-5)
        assert _error(check.selfcheck_baseline(*inputs), ref) < 1e-5  # SDPA's own mask and GQA agree

def test_flops_count_the_pairs_a_bottom_right_mask_keeps():
    for n_q, n_k in ((1, 10), (4, 10), (10, 10), (7, 300)):
        kept = np.tril(np.ones((n_q, n_k)), k=n_k - n_q).sum()
        assert causal_pairs(n_q, n_k) == kept
    sizes = (2, 8, 2, 128, 128, 64)
    full = operators.get("attention").flops(operators.get("attention").problem(sizes, "bf16"))
    half = operators.get("attention+causal").flops(operators.get("attention+causal").problem(sizes, "bf16"))
    assert full == 4 * 2 * 8 * 128 * 128 * 64 and half == full * 129 // 256


def test_the_reference_in_query_blocks_is_the_formula(monkeypatch):
    import operators.attention.operator as attention

    op = operators.get("attention+causal")
    problem = op.problem((2, 6, 2, 13, 29, 16), "fp16")
    inputs = op.make_inputs(problem, seed=5, device="cpu")
    whole = op.reference(*inputs)
    monkeypatch.setattr(attention, "REFERENCE_SCORES", 3 * 29 * 4)  # 4 query rows of the 3 grouped heads at a time
    assert torch.allclose(op.reference(*inputs), whole, atol=1e-6)
    q, k, v = (t.float() for t in inputs)
    k, v = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)
    s = (q @ k.transpose(-1, -2) / 4.0).masked_fill(torch.ones(13, 29, dtype=torch.bool).tril(16).logical_not(),
                                                    float("-inf"))
    assert torch.allclose(torch.softmax(s, dim=-1) @ v, whole, atol=1e-5)


def test_a_persistent_grid_is_capped_and_tma_copies_misaligned_rows():
    op, problem, module = _module("attention+causal", (2, 4, 2, 50, 50, 32), {"BLOCK_M": 16, "BLOCK_N": 16,
                                                                             "num_warps": 2, "persistent": 1,
                                                                             "kv_load": "tma"})
    q, k, v = op.make_inputs(problem, seed=2, device="cpu")
    assert _error(module.attention(q, k, v), op.reference(q, k, v)) < op.tolerance(problem)
    # 4 query tiles x 2 x 4 heads = 32 work items on a persistent grid of one program per SM of 3
    assert next(iter(module._PLANS.values())).kernel.grid == (3, 1, 1)
    # K rows 36 elements apart (72 bytes): not a 16-byte multiple, so the plan copies K before making descriptors
    wide = torch.zeros(2, 2, 50, 36, dtype=k.dtype)
    wide[..., :32] = k
    assert _error(module.attention(q, wide[..., :32], v), op.reference(q, k, v)) < op.tolerance(problem)
    with pytest.raises(ValueError, match="16-byte multiples; head_dim 20"):
        module.attention(q[..., :20], k[..., :20], v[..., :20])


def test_tma_needs_rows_of_16_byte_multiples():
    family = operators.get("attention").family
    problem = operators.get("attention").problem((1, 2, 2, 8, 8, 20), "fp16")
    genome = family.make(family.base(BLOCK_M=16, BLOCK_N=16, num_warps=2, kv_load="tma"))
    assert any("16-byte multiples" in r for r in family.violations(genome, problem, HOPPER))
    assert family.repair(genome, problem, HOPPER, np.random.default_rng(0))["kv_load"] == "pointer"


@pytest.mark.parametrize("name, sizes", [("attention+causal", (1, 4, 2, 5, 37, 32)),
                                         ("attention+causal", (2, 4, 4, 24, 24, 16)),
                                         ("attention", (1, 8, 2, 1, 70, 64))])
def test_the_bench_baselines_are_checked_and_named(name, sizes):
    """`evo bench`'s contenders on CPU tensors: SDPA as called agrees with the reference (the bottom-right causal
    mask, GQA), as does each backend forced alone that runs here (the CPU has a flash kernel); one that cannot (cuDNN)
    is skipped with its reason, never timed."""
    from types import SimpleNamespace

    from evo.bench.entrants import Entrant
    from evo.bench.measure import measure_contenders

    op = operators.get(name)
    problem = op.problem(sizes, "fp16")
    entrants = [Entrant(b.name, b.make, b.doc) for b in op.bench_baselines()]
    assert [e.name for e in entrants] == ["sdpa", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn"]

    def timer(fns, **kw):  # not a measurement: made-up times after one run of each
        for f in fns:
            f()
        return [SimpleNamespace(median_ms=1.0, spread_ms=0.0, times_ms=[1.0] * 5) for _ in fns]

    res = {r.name: r for r in measure_contenders(op, problem, entrants, timer=timer, device="cpu")}
    assert res["sdpa"].status == "ok", res["sdpa"].reason
    for r in res.values():
        assert r.status in ("ok", "skipped"), r
        assert (r.median_ms is None) == (r.status == "skipped") and (r.status == "ok" or r.reason)
    assert res["sdpa_cudnn"].status == "skipped"
