"""Rendered GEMM kernels compile for Hopper (sm_90) without a GPU, one genome per structural feature.

The interpreter ignores launch options, loop hints and warp specialization; compiling through the product's
own ahead-of-time path (evo.evaluate.compiler) checks that Triton's GPU pipeline accepts what the renderer writes.
It runs in a subprocess because this test process has TRITON_INTERPRET set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

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
    # padded rows: N odd (B padded, C stored by pointers), K odd (A padded, C by descriptor)
    (dict(memory="host_descriptor", pad_rows=True, BLOCK_N=192, num_warps=8), (1536, 3001, 5120), "bf16"),
    (dict(memory="host_descriptor", pad_rows=True, persistent=True, epilogue_subtile=True), (2048, 1024, 588),
     "bf16"),
]

SCRIPT = """
import json, sys, warnings
warnings.filterwarnings("ignore")
import operators
from evo.evaluate.pipeline import make_candidate
from evo.evaluate.compiler import compile_candidate
from evo.problem import HOPPER
op = operators.get("gemm")
out = []
for values, shape, dtype in json.loads(sys.argv[1]):
    genome = op.family.make(op.family.base(**values))
    result = compile_candidate(make_candidate(op, genome, op.problem(shape, dtype), HOPPER), HOPPER)
    out.append({"genome": str(genome), "status": result.status, "reason": result.reason[:300],
                "shared": result.resources.get("shared")})
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.slow
def test_representative_genomes_compile_for_hopper(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "EVO_KERNEL_DIR": str(tmp_path / "kernels"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    results = json.loads(lines[-1][len("RESULT"):])
    assert len(results) == len(CASES)
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
    assert all(0 < r["shared"] <= 232448 for r in results)
