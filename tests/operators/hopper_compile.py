"""Rendered kernels compiled for Hopper (sm_90) without a GPU, through the product's own ahead-of-time compile
(evo.evaluate.compiler), in a subprocess: a test process has TRITON_INTERPRET set. The interpreter runs kernels as
Python, so what only Triton's GPU pipeline refuses is caught here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json, sys, warnings
warnings.filterwarnings("ignore")
import operators
from evo.evaluate.pipeline import make_candidate
from evo.evaluate.compiler import compile_candidate
from evo.problem import HOPPER
out = []
for name, values, shape, dtype in json.loads(sys.argv[1]):
    op = operators.get(name)
    genome = op.family.make(op.family.base(**values))
    result = compile_candidate(make_candidate(op, genome, op.problem(shape, dtype), HOPPER), HOPPER)
    out.append({"name": name, "genome": str(genome), "status": result.status, "reason": result.reason[-600:],
                "shared": result.resources.get("shared"), "registers": result.resources.get("registers"),
                "spills": result.resources.get("spills")})
print("RESULT" + json.dumps(out))
"""


def compile_for_hopper(cases: list[tuple[str, dict[str, Any], tuple[int, ...], str]], tmp_path: Path,
                       timeout_s: float) -> list[dict[str, Any]]:
    """Compile each (operator, gene values over its family's base, shape, dtype); one result per case: name,
    genome, status, reason (its end), shared memory, registers, spills. Skips where Triton has no NVIDIA backend."""
    pytest.importorskip("triton.backends.nvidia")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "EVO_KERNEL_DIR": str(tmp_path / "kernels"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(cases)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT"):])
