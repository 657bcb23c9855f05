"""rope_cache kernels compiled for Hopper (sm_90) on the CPU through evo's ahead-of-time compile: both role layouts,
half-head steps, one and several BLOCK_D steps, the eviction hint, a head dim that is not a power of two."""

from __future__ import annotations

from tests.operators.hopper_compile import compile_for_hopper


def test_structures_compile_for_sm90(tmp_path):
    cases = [
        ("rope_cache", {"BLOCK_T": 1, "BLOCK_H": 1, "BLOCK_D": 64, "roles": "mixed", "num_warps": 1},
         (1, 32, 8, 128, 4096), "bf16"),
        ("rope_cache", {"BLOCK_T": 1, "BLOCK_H": 8, "BLOCK_D": 64, "roles": "split", "num_warps": 4},
         (16, 32, 8, 128, 4096), "bf16"),
        ("rope_cache", {"BLOCK_T": 4, "BLOCK_H": 8, "BLOCK_D": 16, "roles": "mixed", "num_warps": 4,
                        "evict_qkv": "evict_first"}, (2048, 28, 4, 64, 1), "fp16"),
        ("rope_cache", {"BLOCK_T": 2, "BLOCK_H": 4, "BLOCK_D": 32, "roles": "split", "num_warps": 2},
         (3, 12, 4, 80, 77), "fp32"),
    ]
    for result in compile_for_hopper(cases, tmp_path, timeout_s=600):
        assert result["status"] == "ok", result
