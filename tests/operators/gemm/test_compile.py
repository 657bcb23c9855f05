"""Rendered GEMM kernels compile for Hopper (sm_90) without a GPU, one genome per structural feature.

The interpreter ignores launch options, loop hints and warp specialization; compiling through the product's
own ahead-of-time path (evo.evaluate.compiler; tests/operators/hopper_compile.py) checks that Triton's GPU
pipeline accepts what the renderer writes.
"""

from __future__ import annotations

import pytest

from tests.operators.hopper_compile import compile_for_hopper

# (genome values over GemmFamily.base(), shape, dtype)
CASES = [
    (dict(), (4096, 4096, 4096), "bf16"),
    (dict(persistent=True, epilogue_subtile=True, loop_stages=3, raster="col"), (4096, 4096, 4096), "bf16"),
    (dict(split_k=4, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128), (16, 4096, 4096), "bf16"),
    (dict(memory="descriptor", loop_unroll=2, loop_stages=2, GROUP_M=1), (4096, 4096, 4096), "fp16"),
    (dict(memory="descriptor", persistent=True, epilogue_subtile=True, BLOCK_N=256, num_warps=8),
     (4096, 4096, 4096), "bf16"),
    (dict(memory="descriptor", warp_specialize=True), (4096, 4096, 4096), "bf16"),
    (dict(memory="descriptor", split_k=8, BLOCK_M=16, BLOCK_N=128, BLOCK_K=128), (16, 4096, 4096), "bf16"),
    (dict(BLOCK_K=32), (1000, 3000, 2000), "fp32"),  # pointer kernel stating ROW_ALIGN
    # host tensor descriptors: the persistent seed measured on an H200, ragged tiles, split-K
    (dict(memory="host_descriptor", persistent=True, epilogue_subtile=True, BLOCK_N=256, num_warps=8),
     (4096, 4096, 4096), "bf16"),
    (dict(memory="host_descriptor", loop_unroll=2, loop_stages=2, raster="col", BLOCK_K=32), (1000, 3000, 2000),
     "fp32"),
    (dict(memory="host_descriptor", split_k=8, BLOCK_M=16, BLOCK_N=128, BLOCK_K=128), (16, 4096, 4096), "bf16"),
    # stream-K after the persistent waves: each memory path, a ragged shape, a subtiled epilogue
    (dict(memory="host_descriptor", persistent=True, stream_k=True, epilogue_subtile=True, BLOCK_N=256,
          num_warps=8), (1000, 3000, 2000), "bf16"),
    (dict(memory="descriptor", persistent=True, stream_k=True, BLOCK_M=16, BLOCK_N=64, BLOCK_K=128),
     (16, 4096, 4096), "bf16"),
    (dict(persistent=True, stream_k=True, loop_stages=3), (128, 4096, 14336), "bf16"),
    # the peeled K tail of pointer kernels inside a flattened persistent loop (K = 2000 is not a multiple of 64)
    (dict(persistent=True, BLOCK_N=192, num_warps=8, loop_stages=3), (1000, 3000, 2000), "bf16"),
    # wide tiles (128 + 64 columns) on descriptors, persistent or not
    (dict(memory="host_descriptor", persistent=True, BLOCK_N=192, num_warps=8, num_stages=4), (3000, 3000, 3000),
     "bf16"),
    (dict(memory="descriptor", BLOCK_N=96, BLOCK_M=64), (1000, 3000, 2000), "fp16"),
    # tens of splits over long K (issue 44), summed in two levels beyond 16: each memory path, a subtiled epilogue
    (dict(memory="host_descriptor", split_k=32, num_warps=8, num_stages=4), (512, 512, 131072), "bf16"),
    (dict(memory="descriptor", split_k=128, BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, num_stages=4), (64, 64, 20000),
     "fp16"),
    (dict(split_k=24, num_warps=8, num_stages=4, epilogue_subtile=True), (256, 768, 200000), "bf16"),
    # 320-wide tiles (256 + 64 columns) on every memory path, persistent or not
    (dict(memory="host_descriptor", BLOCK_M=64, BLOCK_N=320, num_warps=8), (1152, 4352, 4096), "bf16"),
    (dict(memory="host_descriptor", persistent=True, BLOCK_M=64, BLOCK_N=320, num_warps=8), (1152, 4352, 4096),
     "bf16"),
    (dict(memory="descriptor", BLOCK_M=64, BLOCK_N=320, num_warps=8), (1152, 4352, 4096), "fp16"),
    (dict(BLOCK_M=64, BLOCK_N=320, num_warps=8), (1000, 3000, 2000), "bf16"),
    # padded rows: N odd (B padded, C stored by pointers), K odd (A padded, C by descriptor)
    (dict(memory="host_descriptor", pad_rows=True, BLOCK_N=192, num_warps=8), (1536, 3001, 5120), "bf16"),
    (dict(memory="host_descriptor", pad_rows=True, persistent=True, epilogue_subtile=True), (2048, 1024, 588),
     "bf16"),
]


@pytest.mark.slow
def test_representative_genomes_compile_for_hopper(tmp_path):
    results = compile_for_hopper([("gemm", values, shape, dtype) for values, shape, dtype in CASES], tmp_path,
                                 timeout_s=600)
    assert len(results) == len(CASES)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
    assert all(0 < r["shared"] <= 232448 for r in results)


@pytest.mark.slow
def test_padding_copies_move_as_many_elements_at_once_as_the_rows_allow(tmp_path):
    """The copy of unaligned rows into padded ones loads and stores vectors of the largest power of two dividing
    the row length (rows of 588 bf16 start every 8 bytes: 4 elements at once; 590: 2; 589: 1), read from the sm_90
    PTX in the compile cache (before, Triton saw no alignment in the row strides: one element per access)."""
    import re

    cases = [("gemm", dict(memory="host_descriptor", pad_rows=True, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64),
              (256, 256, k), "bf16") for k in (588, 590, 589)]
    results = compile_for_hopper(cases, tmp_path, timeout_s=600)
    assert all(r["status"] == "ok" for r in results), results
    widest = {}
    for ptx in (tmp_path / "cache").rglob("copy_rows_kernel.ptx"):
        text = ptx.read_text()
        loads, stores = set(re.findall(r"ld\.global\S*", text)), set(re.findall(r"st\.global\S*", text))
        assert len(loads) == 1 and len(stores) == 1, (loads, stores)
        widest[loads.pop()] = stores.pop()
    assert widest == {"ld.global.v2.b32": "st.global.v2.b32", "ld.global.b32": "st.global.b32",
                      "ld.global.b16": "st.global.b16"}
