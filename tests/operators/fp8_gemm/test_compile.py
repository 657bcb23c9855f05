"""The FP8 GEMM compiles for Hopper (sm_90) without a GPU, one genome per scale mode and structure: the plain tile,
promotion, a wide W tile (block scales per column), swap_ab with a split of K (decode), a K that is not a multiple of
BLOCK_K, a and W through tensor descriptors, a persistent grid (tests/operators/hopper_compile.py)."""

from __future__ import annotations

import pytest

from tests.operators.hopper_compile import compile_for_hopper

PREFILL = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, num_warps=8, num_stages=4)
DECODE = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, swap_ab=True, GROUP_M=1, SPLIT_K=4, num_stages=4)
CASES = [
    ("fp8_gemm", PREFILL, (2048, 4096, 4096), "bf16"),
    ("fp8_gemm", dict(PREFILL, promote=True), (2048, 4096, 4096), "fp16"),
    ("fp8_gemm", dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_stages=5), (1000, 3000, 1000), "bf16"),
    ("fp8_gemm+channel", dict(PREFILL, BLOCK_N=256, num_stages=3), (2048, 14336, 4096), "bf16"),
    ("fp8_gemm+channel", DECODE, (16, 4096, 4096), "bf16"),
    ("fp8_gemm+block", PREFILL, (2048, 4096, 4096), "bf16"),
    ("fp8_gemm+block", dict(PREFILL, BLOCK_M=64, BLOCK_N=256, num_stages=3), (2048, 6144, 4096), "bf16"),
    ("fp8_gemm+block", DECODE, (16, 4096, 14336), "bf16"),
    # a and W through tensor descriptors (TMA)
    ("fp8_gemm", dict(PREFILL, memory="descriptor"), (2048, 4096, 4096), "bf16"),
    ("fp8_gemm+channel", dict(DECODE, memory="descriptor"), (16, 4096, 4096), "bf16"),
    ("fp8_gemm+block", dict(PREFILL, memory="descriptor"), (2048, 4096, 4096), "bf16"),
    ("fp8_gemm+block", dict(PREFILL, BLOCK_M=64, BLOCK_N=256, num_stages=3, memory="descriptor"), (2048, 6144, 4096),
     "bf16"),
    # a persistent grid walking the (tile, split) items, its loop flattened
    ("fp8_gemm", dict(PREFILL, memory="descriptor", persistent=1), (2048, 28672, 4096), "bf16"),
    ("fp8_gemm+channel", dict(PREFILL, persistent=2), (2048, 4096, 14336), "bf16"),
    ("fp8_gemm+block", dict(PREFILL, memory="descriptor", persistent=1), (2048, 28672, 4096), "bf16"),
    ("fp8_gemm+channel", dict(DECODE, SPLIT_K=8, memory="descriptor", persistent=1), (16, 28672, 4096), "bf16"),
]


@pytest.mark.slow
def test_every_scale_mode_compiles_for_hopper(tmp_path):
    results = compile_for_hopper(CASES, tmp_path, timeout_s=900)
    assert len(results) == len(CASES)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
    spilled = [r for r in results if r["spills"]]
    assert not spilled, spilled
