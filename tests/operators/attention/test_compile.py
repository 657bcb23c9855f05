"""Rendered attention kernels compile for Hopper (sm_90) without a GPU: every combination of the structural genes
(GQA packing, split keys and both reductions, both mask loops, TMA or pointer loads, persistent or not), at decode
and prefill shapes, head dims 128 and 80.

The interpreter runs the kernels as Python, so what only Triton's compiler refuses (a loop-carried variable that
changes type, a construct its GPU pipeline does not take) is caught here. It runs the product's own ahead-of-time
compile (evo.evaluate.compiler) in a subprocess, because this test process has TRITON_INTERPRET set.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STRUCTURE = [dict(pack_gqa=pack, kv_split=split, reduce=reduce, kv_load=load, persistent=persistent, mask_loop=mask)
             for pack, (split, reduce), load, persistent, mask in itertools.product(
                 (False, True), ((1, "launch"), (4, "launch"), (4, "last_program")), ("pointer", "tma"), (0, 1),
                 ("split", "masked"))]
TILES = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)

SCRIPT = """
import json, sys, warnings
warnings.filterwarnings("ignore")
import operators
from evo.evaluate.pipeline import make_candidate
from evo.evaluate.compiler import compile_candidate
from evo.problem import HOPPER
out = []
for name, values, shape in json.loads(sys.argv[1]):
    op = operators.get(name)
    genome = op.family.make(op.family.base(**values))
    result = compile_candidate(make_candidate(op, genome, op.problem(shape, "bf16"), HOPPER), HOPPER)
    out.append({"name": name, "genome": str(genome), "status": result.status, "reason": result.reason[-600:]})
print("RESULT" + json.dumps(out))
"""


@pytest.mark.slow
def test_every_structure_compiles_for_hopper(tmp_path):
    pytest.importorskip("triton.backends.nvidia")
    cases = [("attention+causal" if i % 2 else "attention", {**TILES, **s},
              (1, 32, 8, 1 if i % 3 == 0 else 300, 4096, 80 if i % 5 == 0 else 128)) for i, s in enumerate(STRUCTURE)]
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "EVO_KERNEL_DIR": str(tmp_path / "kernels"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cases)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    results = json.loads(lines[-1][len("RESULT"):])
    assert len(results) == len(cases) == 48
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
