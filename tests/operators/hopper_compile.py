"""Rendered kernels compiled for Hopper (sm_90) without a GPU, through the product's own ahead-of-time compile
(evo.evaluate.compiler), in a subprocess: a test process has TRITON_INTERPRET set. The interpreter runs kernels as
Python, so what only Triton's GPU pipeline refuses is caught here.

The cases are dealt to one subprocess per core (at most MAX_WORKERS), in a fixed shuffled order so that a case list
built in a pattern (causal every other case, ...) does not load one worker with the slow half: a compile is one
core's work and the test process only waits, so on CI's two cores the compile tests take about half the time. The
workers share one Triton cache (its writes are atomic), so a kernel two workers build is one cache entry, as it was
in one process."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
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


MAX_WORKERS = 4


def _workers(cases: int) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cases, cores, MAX_WORKERS))


def compile_for_hopper(cases: list[tuple[str, dict[str, Any], tuple[int, ...], str]], tmp_path: Path,
                       timeout_s: float) -> list[dict[str, Any]]:
    """Compile each (operator, gene values over its family's base, shape, dtype); one result per case, in the
    cases' order: name, genome, status, reason (its end), shared memory, registers, spills. Skips where Triton has
    no NVIDIA backend."""
    pytest.importorskip("triton.backends.nvidia")
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "EVO_KERNEL_DIR": str(tmp_path / "kernels"), "PYTHONPATH": str(ROOT)}
    n = _workers(len(cases))
    order = list(range(len(cases)))
    random.Random(0).shuffle(order)
    chunks = [order[w::n] for w in range(n)]
    logs = tmp_path / "compile-logs"
    logs.mkdir(exist_ok=True)
    procs = []
    for w in range(n):
        with open(logs / f"{w}.out", "w") as out, open(logs / f"{w}.err", "w") as err:
            chunk = json.dumps([cases[i] for i in chunks[w]])
            procs.append(subprocess.Popen([sys.executable, "-c", SCRIPT, chunk], cwd=ROOT, env=env, stdout=out,
                                          stderr=err, text=True))
    deadline = time.monotonic() + timeout_s
    try:
        for proc in procs:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    results: list[dict[str, Any]] = [{}] * len(cases)
    for w, proc in enumerate(procs):
        lines = [line for line in (logs / f"{w}.out").read_text().splitlines() if line.startswith("RESULT")]
        assert proc.returncode == 0 and lines, (logs / f"{w}.err").read_text()[-3000:]
        for i, result in zip(chunks[w], json.loads(lines[-1][len("RESULT"):]), strict=True):
            results[i] = result
    return results
