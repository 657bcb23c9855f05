"""The decode operators' kernels compile for Hopper (sm_90) without a GPU: every structure switch of `linear` (tl.dot
or FMAs reduced per step or at the end; no split, atomic split, ordered split; a K that is not a 16-byte multiple),
each variant's epilogue and prologue, and rmsnorm+residual's single pass and loop. The interpreter runs kernels as
Python, so what only Triton's GPU pipeline refuses is caught here (tests/operators/hopper_compile.py)."""

from __future__ import annotations

import itertools

import pytest

from tests.operators.hopper_compile import compile_for_hopper

MATH = [dict(math="dot", BLOCK_N=64, BLOCK_K=128, num_stages=4), dict(math="fma", BLOCK_N=32, BLOCK_K=256),
        dict(math="fma", BLOCK_N=16, BLOCK_K=128, reduce_k="end", num_stages=3, evict_w="evict_first")]
SPLIT = [dict(SPLIT_K=1), dict(SPLIT_K=4), dict(SPLIT_K=8, reduction="ordered")]


@pytest.mark.slow
def test_every_structure_compiles_for_hopper(tmp_path):
    # a split tl.dot tile is reduced in ordered slots (the family's rule): its atomic split is not a structure
    cases = [("linear", {**m, **s}, (1 if m["math"] == "fma" else 16, 4096, 4096), "bf16")
             for m, s in itertools.product(MATH, SPLIT) if not (m["math"] == "dot" and s == SPLIT[1])]
    cases += [("linear", dict(math="dot", SPLIT_K=4, reduction="ordered"), (3, 4100, 4100),  # 8-byte rows: narrower
               "fp16"),  # loads
              ("linear+residual", dict(math="dot", SPLIT_K=8, reduction="ordered"), (1, 4096, 14336), "bf16"),
              ("linear+swiglu", dict(math="fma", BLOCK_N=16, BLOCK_K=128, SPLIT_K=4, reduction="ordered"),
               (2, 14336, 4096), "bf16"),
              ("linear+rmsnorm", dict(math="dot", BLOCK_N=128, BLOCK_K=128, SPLIT_K=2, num_stages=3,
                                      reduction="ordered"), (16, 6144, 4096), "bf16"),
              ("linear+rmsnorm+swiglu", dict(math="dot", SPLIT_K=4, num_stages=3, reduction="ordered"),
               (16, 14336, 4096), "bf16"),
              ("linear+rmsnorm+bias+residual", dict(math="dot", SPLIT_K=4, num_stages=3, reduction="ordered"),
               (4, 4608, 3584), "bf16"),
              ("linear+rmsnorm+swiglu", dict(math="fma", BLOCK_N=16, BLOCK_K=128, SPLIT_K=4), (1, 14336, 4096), "fp32"),
              ("rmsnorm+residual", dict(BLOCK=4096, num_warps=8, evict_in="evict_first", store="streaming"),
               (1, 4096), "bf16"),
              ("rmsnorm+residual", dict(BLOCK=1024, ROWS=2, mode="looped", num_stages=3, evict_w="evict_last"),
               (16, 5000), "bf16")]
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    assert len(results) == len(cases)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
