"""The rope_cache kernel in the CPU interpreter: seeds and seeded random genomes against the fp32 formula through
evo's own check (q and the cache's written positions judged, the rest of the cache unchanged), over token counts,
head layouts, head dims and starts; half tables, strided arguments and positions past the cache."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.check import check_launcher
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from genomes.rope_cache import RopeCacheFamily
from operators.rope_cache.torch_code import rope_reference, rope_written, torch_rope_cache

OP = operators.get("rope_cache")
TARGET = INTERPRETED_HOPPER


def make_inputs(tokens, heads, kv_heads, head_dim, start, capacity, dtype=torch.float32, seed=0, half_table=False):
    """qkv, tables of `start + tokens` random-angle rows, a random cache of `capacity` positions, start as int32."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen).to(dtype)
    cache = torch.randn(2, 1, kv_heads, capacity, head_dim, generator=gen).to(dtype)
    angles = torch.rand(start + tokens, head_dim // 2, generator=gen) * 6.283
    if not half_table:
        angles = torch.cat((angles, angles), dim=-1)
    return qkv, angles.cos(), angles.sin(), cache, torch.tensor([start], dtype=torch.int32)


def written(inputs):
    qkv, _, _, cache, start = inputs
    return [rope_written(cache, start, qkv.shape[0])]


def check(fn, inputs, dtype=torch.float32):
    """evo's check of `fn` on `inputs`: (status, error, reason)."""
    tol = OP.tolerance(OP.problem((1, 1, 1, 2, 1), {torch.float32: "fp32", torch.float16: "fp16"}[dtype]))
    res = check_launcher(fn, inputs, rope_reference(*inputs), tol, "cpu", written=written)
    return res.status, res.max_rel_error, res.reason


def entry(genome, problem):
    return load_source(OP.render(genome, problem, TARGET)).rope_cache


def _cases():
    """Every token count with both head layouts and both head dims; the start at 0 or near 4096 in turn."""
    out = []
    for tokens in (1, 3, 16, 64):
        for heads, kv_heads in ((32, 8), (28, 4)):
            for head_dim in (64, 128):
                start = 4000 if (heads == 32) != (head_dim == 64) else 0
                out.append((tokens, heads, kv_heads, head_dim, start))
    return out


@pytest.mark.parametrize("case", _cases(), ids=lambda c: "T{}_h{}x{}_d{}_s{}".format(*c))
def test_seeds_and_random_genomes_match_the_formula(case):
    tokens, heads, kv_heads, head_dim, start = case
    capacity = 4096 + tokens
    dtype = torch.float16 if tokens == 3 else torch.float32
    problem = OP.problem((tokens, heads, kv_heads, head_dim, max(start, 1)), "fp16" if tokens == 3 else "fp32")
    rng = np.random.default_rng(sum(case))
    # the interpreter runs programs one at a time: at 64 tokens, genomes of at most a few hundred programs
    family = OP.family if tokens < 64 else RopeCacheFamily({"BLOCK_T": [8, 16, 32, 64], "BLOCK_H": [4, 8, 16, 32, 64]})
    seeds = family.seeds(problem, TARGET)
    picked = [seeds[int(i)] for i in rng.choice(len(seeds), size=2, replace=False)]
    picked += [family.random(rng, problem, TARGET) for _ in range(2)]
    inputs = make_inputs(tokens, heads, kv_heads, head_dim, start, capacity, dtype, seed=int(rng.integers(1 << 20)))
    for genome in picked:
        status, err, reason = check(entry(genome, problem), inputs, dtype)
        assert status == "ok", (genome, reason)
    # the user's torch code passes the same check (the reference and the written views agree with it)
    assert check(torch_rope_cache, inputs, dtype)[0] == "ok"


def test_every_structure_on_an_odd_head_dim_and_half_tables():
    """Head dim 80 (half 40, padded to 64): mixed and split roles, one and several BLOCK_D steps, tables of D/2."""
    problem = OP.problem((5, 6, 2, 80, 9), "fp32")
    genomes = [OP.family.make(OP.family.base(BLOCK_T=bt, BLOCK_H=bh, BLOCK_D=bd, roles=roles, num_warps=1))
               for bt, bh, bd, roles in ((1, 4, 64, "mixed"), (2, 8, 16, "split"), (4, 2, 8, "mixed"),
                                         (8, 1, 32, "split"))]
    for half_table in (False, True):
        inputs = make_inputs(5, 6, 2, 80, 9, 20, half_table=half_table)
        for genome in genomes:
            assert OP.family.violations(genome, problem, TARGET) == []
            status, err, reason = check(entry(genome, problem), inputs)
            assert status == "ok" and err < 1e-6, (genome, half_table, reason)


def test_strided_qkv_and_out_and_an_int64_start():
    """qkv as columns of a wider buffer, q into a [1, T, H, D] buffer seen as [1, H, T, D], start int64."""
    problem = OP.problem((4, 4, 2, 64, 7), "fp32")
    fn = entry(OP.family.seeds(problem, TARGET)[0], problem)
    qkv, cos, sin, cache, start = make_inputs(4, 4, 2, 64, 7, 16)
    wide = torch.randn(4, qkv.shape[1] + 32)
    wide[:, 16:16 + qkv.shape[1]] = qkv
    strided = wide[:, 16:16 + qkv.shape[1]]
    out = torch.full((1, 4, 4, 64), float("nan")).transpose(1, 2)
    q_ref, kv_ref = rope_reference(qkv, cos, sin, cache, start)
    got = fn(strided, cos, sin, cache, start.long(), out=out)
    assert got is out and torch.allclose(out, q_ref, atol=1e-6)
    assert torch.allclose(rope_written(cache, start, 4), kv_ref, atol=1e-6)


def test_positions_past_the_cache_write_nothing_there_and_nan_into_q():
    problem = OP.problem((3, 4, 2, 64, 7), "fp32")
    fn = entry(OP.family.seeds(problem, TARGET)[0], problem)
    qkv, cos, sin, cache, _ = make_inputs(3, 4, 2, 64, 7, 8)  # tables reach position 9, the cache position 7
    before = cache.clone()
    q = fn(qkv, cos, sin, cache, torch.tensor([7], dtype=torch.int32))
    q_ref, kv_ref = rope_reference(qkv, cos, sin, before, torch.tensor([7]))
    assert torch.allclose(q[:, :, 0], q_ref[:, :, 0], atol=1e-6) and q[:, :, 1:].isnan().all()
    assert torch.allclose(cache[:, :, :, 7], kv_ref[:, :, :, 0], atol=1e-6)
    assert torch.equal(cache[:, :, :, :7], before[:, :, :, :7])


def test_the_check_judges_the_cache_write():
    """Launchers that return the right q but write the cache wrongly fail evo's check, each for its reason."""
    inputs = make_inputs(3, 4, 2, 64, 5, 12)

    def no_write(qkv, cos, sin, cache, start):
        return torch_rope_cache(qkv, cos, sin, cache.clone(), start)

    def one_off(qkv, cos, sin, cache, start):
        return torch_rope_cache(qkv, cos, sin, cache, start - 1)  # q rotated at the wrong positions too

    def spills(qkv, cos, sin, cache, start):
        q = torch_rope_cache(qkv, cos, sin, cache, start)
        cache[1, 0, 0, 0, 0] += 1.0  # a stray write outside the written positions
        return q

    def stale(qkv, cos, sin, cache, start, state={}):  # noqa: B006 - writes the cache on its first call only
        if not state:
            state["done"] = True
            return torch_rope_cache(qkv, cos, sin, cache, start)
        return torch_rope_cache(qkv, cos, sin, cache.clone(), start)

    def unrotated(qkv, cos, sin, cache, start):
        q = torch_rope_cache(qkv, cos, sin, cache, start)
        t, (hq, hkv, d) = qkv.shape[0], (4, 2, 64)
        k = qkv[:, hq * d:(hq + hkv) * d].reshape(t, hkv, d).transpose(0, 1).unsqueeze(0)
        cache[0].index_copy_(2, start.long() + torch.arange(t), k)  # keys written as they came
        return q

    status, err, reason = check(unrotated, inputs)
    assert status == "wrong" and err > 0.1 and "exceeds the tolerance" in reason
    status, _, reason = check(no_write, inputs)  # its positions hold the poison of the judged run
    assert status == "nan" and reason.startswith("output 1 holds")
    assert check(one_off, inputs)[0] == "nan"  # its last new position is never written: the poison stays
    status, _, reason = check(spills, inputs)
    assert status == "wrong" and "modified its input 3" in reason
    assert check(stale, inputs)[0] == "nan"  # the judged run's written positions still hold the poison


@pytest.mark.parametrize("bad, message", [
    (lambda a: (a[0].half(), *a[1:]), "qkv must be a 2-d"),
    (lambda a: (a[0][:, :-32], *a[1:]), "qkv's rows must hold"),
    (lambda a: (a[0], a[1].half(), *a[2:]), "cos must be a float32"),
    (lambda a: (a[0], a[1], a[2][:, :16], *a[3:]), "sin must be a float32"),
    (lambda a: (a[0], a[1], a[2][:, :32], *a[3:]), "cos and sin must have one shape"),
    (lambda a: (*a[:3], a[3][0], a[4]), "cache must be a [2, 1, kv_heads"),
    (lambda a: (*a[:4], 5), "start must be a one-element int32 or int64 tensor"),
    (lambda a: (*a[:4], a[4].float()), "start must be a one-element"),
])
def test_bad_arguments_are_refused_in_one_line(bad, message):
    problem = OP.problem((2, 4, 2, 64, 3), "fp32")
    fn = entry(OP.family.seeds(problem, TARGET)[0], problem)
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        fn(*bad(make_inputs(2, 4, 2, 64, 3, 8)))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="out must be a"):
        fn(*make_inputs(2, 4, 2, 64, 3, 8), out=torch.empty(1, 4, 2, 32))
