"""The Gluon GEMM kernel (operators/gemm/gluon_kernel.py, one real @gluon.jit file whose structure genes are
constexpr switches) compiled for sm_90 on the CPU: one genome per switch (ping-pong, row split of 2 and 3, wide tiles,
split-K, stream-K, a fused epilogue, padded rows) compiles to the shared memory, registers and spills, and the wgmma
and TMA instruction counts, that the rendering it replaced (kernels assembled from text with markers) compiled to on
Triton 3.9. The GPU tests (tests/gpu/test_gemm_sample.py, test_gemm_stream_k_gpu.py) check their results."""

from __future__ import annotations

import re

import pytest
from triton.runtime.jit import KernelInterface

from genomes.gemm_gluon import GLUON_FIXED
from operators._paste import pasted_source
from operators.gemm.gluon_source import KERNEL_FILE, SPLIT_FILE
from tests.operators.hopper_compile import compile_for_hopper


def _genome(**values):
    base = {**GLUON_FIXED, "backend": "gluon", "epilogue_subtile": False, "GROUP_M": 8, "raster": "row",
            "consumers": 1, "consumer_split": "tiles", "split_k": 1, "stream_k": False, "pad_rows": False}
    return {**base, **values}


# (operator, genes, shape, dtype) -> (shared bytes, registers, spill bytes, wgmma, TMA copies) of the marker-based
# rendering (main 6624e35) compiled for sm_90 by Triton 3.9
CASES = [
    (("gemm", _genome(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_stages=4, num_warps=8), (4096, 4096, 4096), "bf16"),
     (213188, 168, 0, 8, 6)),  # one consumer of two warp groups, a wide tile
    (("gemm+scale+bias+gelu+residual", _genome(BLOCK_M=64, BLOCK_N=96, BLOCK_K=16, GROUP_M=4, raster="col",
                                                num_stages=5, num_warps=4, consumers=2), (1024, 1024, 1024), "fp16"),
     (50520, 168, 0, 4, 7)),  # ping-pong, wide, every epilogue part
    (("gemm+bias+gelu", _genome(BLOCK_M=192, BLOCK_N=128, BLOCK_K=64, raster="col", num_stages=4, num_warps=4,
                                consumers=3, consumer_split="rows", stream_k=True), (4096, 4096, 4096), "bf16"),
     (213252, 128, 0, 12, 8)),  # three row-split consumers, stream-K, an epilogue after the fix-up
    (("gemm+gelu_tanh", _genome(BLOCK_M=64, BLOCK_N=64, BLOCK_K=16, raster="col", num_stages=4, num_warps=4,
                                consumers=2, split_k=12), (1024, 1024, 512), "bf16"),
     (16600, 168, 0, 2, 2)),  # ping-pong split-K, the epilogue in the reduction
    (("gemm", _genome(BLOCK_M=128, BLOCK_N=192, BLOCK_K=32, GROUP_M=4, raster="col", num_stages=4, num_warps=4,
                      consumers=2, consumer_split="rows", pad_rows=True), (1000, 3001, 588), "bf16"),
     (131336, 168, 0, 8, 9)),  # two row-split consumers, wide, padded rows
    (("gemm", _genome(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=4, num_stages=2, num_warps=8, stream_k=True),
      (4096, 4096, 4096), "bf16"), (163988, 168, 88, 4, 6)),  # one consumer, stream-K
]


def test_the_kernel_files_are_real_modules_pasted_from_their_markers():
    import operators.gemm.gluon_kernel as kernel
    import operators.gemm.gluon_split as split

    for module, names in ((kernel, ("gemm_kernel", "load_partition", "mma_partition", "tile_coords")),
                          (split, ("stream_k_runs", "stream_k_fixup", "sum_partials"))):
        assert all(isinstance(getattr(module, n), KernelInterface) for n in names)  # JIT'd, or interpreted
    assert "def gemm_kernel(" in pasted_source(KERNEL_FILE) and "import" not in pasted_source(SPLIT_FILE)


@pytest.mark.slow
def test_each_switch_compiles_for_hopper_as_the_marker_based_rendering_did(tmp_path):
    results = compile_for_hopper([case for case, _ in CASES], tmp_path, timeout_s=900)
    for (case, (shared, registers, spills, _, _)), r in zip(CASES, results, strict=True):
        assert r["status"] == "ok", (case, r["reason"])
        assert (r["shared"], r["registers"], r["spills"]) == (shared, registers, spills), (case, r)
    ptx = [p.read_text() for p in (tmp_path / "cache").rglob("matmul_kernel.ptx")]
    counts = sorted((len(re.findall(r"\bwgmma\.mma_async", p)), len(re.findall(r"\bcp\.async\.bulk\.tensor", p)))
                    for p in ptx)
    assert counts == sorted((w, t) for _, (_, _, _, w, t) in CASES)
    assert all("setmaxnreg" in p for p in ptx)  # the roles' register budgets
    assert len(list((tmp_path / "cache").rglob("split_k_reduce.ptx"))) == 1
