"""Gemma 2's operators compile for Hopper (sm_90) without a GPU: attention with the logit cap and the sliding window
(Gemma 2's head dim 256, decode and prefill, every loop structure the switches touch) and the decode GEMM's GeGLU
epilogue (tl.dot and FMAs, with and without the key split), through the product's own ahead-of-time compile
(tests/operators/hopper_compile.py). Their registers and spills are printed beside the same genomes' without the
switches (the variant's cost). The prefill GEMM's GeGLU epilogue (gemm+geglu, Gemma 2's gate_up above 16 tokens) beside
gemm+swiglu's: the same genomes must compile alike but for the gate's arithmetic."""

from __future__ import annotations

import pytest

from tests.operators.hopper_compile import compile_for_hopper

GEMMA_ATTENTION = [  # (genes, (batch, heads, kv_heads, q_len, kv_len, head_dim)) of Gemma-2-9B's attention
    (dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2), (1, 16, 8, 2048, 2048, 256)),
    (dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2, kv_load="tma", q_order="reverse"),
     (1, 16, 8, 2048, 2048, 256)),
    (dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=2, mask_loop="masked", persistent=1),
     (1, 16, 8, 2048, 2048, 256)),
    (dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=2, pack_gqa=True, kv_split=8, reduce="last_program"),
     (1, 16, 8, 1, 8192, 256)),
    (dict(BLOCK_M=16, BLOCK_N=64, num_warps=4, num_stages=2, pack_gqa=True, kv_split=4), (1, 16, 8, 1, 8192, 256)),
]
GEGLU = [  # Gemma-2-9B's gate_up: hidden 3584, intermediate 14336
    ("linear+geglu", dict(math="fma", BLOCK_N=16, BLOCK_K=128, SPLIT_K=4, reduction="ordered"), (1, 14336, 3584)),
    ("linear+rmsnorm+geglu", dict(math="dot", SPLIT_K=4, num_stages=3, reduction="ordered"), (16, 14336, 3584)),
    ("linear+rmsnorm+geglu", dict(math="fma", BLOCK_N=16, BLOCK_K=128, SPLIT_K=1), (1, 14336, 3584)),
]

GEMM_GEGLU = [  # gemm+geglu's Triton seeds at Gemma-2-9B's gate_up over 2048 tokens (the Gluon kernel takes no gate)
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, memory="host_descriptor", persistent=True,
         epilogue_subtile=True),
    dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4, memory="descriptor"),
]


@pytest.mark.slow
def test_gemm_geglu_compiles_for_hopper_as_swiglu_does(tmp_path):
    cases = [(name, genes, (2048, 14336, 3584), "bf16") for genes in GEMM_GEGLU
             for name in ("gemm+geglu", "gemm+swiglu")]
    results = compile_for_hopper(cases, tmp_path, timeout_s=1200)
    assert len(results) == len(cases)
    for r in results:
        print(f"{r['name']:14} {r['status']:8} registers {r['registers']} spills {r['spills']} shared {r['shared']} "
              f"{r['genome']}")
    assert all(r["status"] == "ok" for r in results), results
    for geglu, swiglu in zip(results[::2], results[1::2], strict=True):
        assert geglu["genome"] == swiglu["genome"] and geglu["shared"] == swiglu["shared"]
        assert geglu["spills"] <= swiglu["spills"], (geglu, swiglu)  # (Triton 3.9 on this CPU: none, 165-255 registers)


@pytest.mark.slow
def test_gemma_variants_compile_for_hopper(tmp_path):
    cases = []
    for genes, shape in GEMMA_ATTENTION:
        for name in ("attention+causal", "attention+causal+softcap50", "attention+causal+softcap50+window4096"):
            cases.append((name, genes, shape, "bf16"))
    for name, genes, shape in GEGLU:
        cases += [(name, genes, shape, "bf16"), (name.replace("geglu", "swiglu"), genes, shape, "bf16")]
    results = compile_for_hopper(cases, tmp_path, timeout_s=1200)
    assert len(results) == len(cases)
    for r in results:
        print(f"{r['name']:42} {r['status']:8} registers {r['registers']} spills {r['spills']} shared {r['shared']} "
              f"{r['genome']}")
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
