"""Rendered attention kernels compile for Hopper (sm_90) without a GPU: every combination of the structural genes
(GQA packing, split keys and both reductions, both mask loops, TMA or pointer loads, persistent or not), at decode
and prefill shapes, head dims 128 and 80.

The interpreter runs the kernels as Python, so what only Triton's compiler refuses (a loop-carried variable that
changes type, a construct its GPU pipeline does not take) is caught here. It runs the product's own ahead-of-time
compile (tests/operators/hopper_compile.py).
"""

from __future__ import annotations

import itertools

import pytest

from tests.operators.hopper_compile import compile_for_hopper

STRUCTURE = [dict(pack_gqa=pack, kv_split=split, reduce=reduce, kv_load=load, persistent=persistent, mask_loop=mask)
             for pack, (split, reduce), load, persistent, mask in itertools.product(
                 (False, True), ((1, "launch"), (4, "launch"), (4, "last_program")), ("pointer", "tma"), (0, 1),
                 ("split", "masked"))]
TILES = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)


@pytest.mark.slow
def test_every_structure_compiles_for_hopper(tmp_path):
    cases = [("attention+causal" if i % 2 else "attention", {**TILES, **s},
              (1, 32, 8, 1 if i % 3 == 0 else 300, 4096, 80 if i % 5 == 0 else 128), "bf16")
             for i, s in enumerate(STRUCTURE)]
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    assert len(results) == len(cases) == 48
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
