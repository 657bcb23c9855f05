"""The MoE expert GEMM kernels compile for Hopper (sm_90) without a GPU: the small-M path (swap_ab) and the grouped
GEMM tiles, both work orders, a persistent grid, routing in the kernel, the down projection's in-kernel combine,
torch-sum combine and top-1 store, a K that is not a multiple of BLOCK_K (tests/operators/hopper_compile.py)."""

from __future__ import annotations

import pytest

from tests.operators.hopper_compile import compile_for_hopper

DECODE = dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, swap_ab=True, num_stages=4)
PREFILL = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, GROUP_M=8, num_stages=3)
CASES = [
    ("moe_gate_up", DECODE, (4, 8, 2, 14336, 4096), "bf16"),
    ("moe_gate_up", dict(DECODE, work="tile_major", persistent=2), (16, 8, 2, 14336, 4096), "bf16"),
    ("moe_gate_up", PREFILL, (2048, 8, 2, 14336, 4096), "bf16"),
    ("moe_gate_up", dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, persistent=1), (512, 60, 4, 1408, 2048), "fp16"),
    ("moe_down", DECODE, (4, 8, 2, 4096, 14336), "bf16"),
    ("moe_down", dict(DECODE, combine="torch_sum"), (16, 8, 2, 4096, 14336), "bf16"),
    ("moe_down", dict(PREFILL, BLOCK_N=64, num_warps=4), (2048, 8, 2, 4096, 14336), "bf16"),
    ("moe_down", dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=64), (64, 8, 1, 4096, 1000), "fp16"),
    ("moe_gate_up", dict(DECODE, routing="in_kernel"), (16, 8, 2, 14336, 4096), "bf16"),
    ("moe_down", dict(DECODE, routing="in_kernel", persistent=2), (16, 60, 4, 2048, 1408), "bf16"),
]


@pytest.mark.slow
def test_every_structure_compiles_for_hopper(tmp_path):
    results = compile_for_hopper(CASES, tmp_path, timeout_s=900)
    assert len(results) == len(CASES)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
