"""rope_cache on a GPU: bf16 correctness of every seed and a seeded sample of random genomes through evo's own check
(q and the cache's written positions judged, the rest of the cache unchanged), then the seeds timed beside the torch
code a user writes, eager and torch.compile'd, and beside evo's op called inside torch.compile (the cache a mutated
argument: no copies), each on three clocks: GPU time (CUDA events, L2 flushed, median, interleaved), back-to-back
eager calls, and CUDA-graph replay (µs per call). Llama-3-8B's attention heads (32 query, 8 KV, head dim 128) and
Llama-3.2-1B's (32, 8, 64), at 1 and 16 new tokens after a 4096-token context.

    python -m pytest tests/gpu/test_rope_cache_gpu.py -m gpu -s
    python tests/gpu/test_rope_cache_gpu.py            # the table; JSON to $EVO_OUT/rope_cache_gpu.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

ROOT = Path(__file__).resolve().parents[2]
MODELS = {"llama-3-8b": (32, 8, 128), "llama-3.2-1b": (32, 8, 64)}
TOKENS = (1, 16)
CONTEXT = 4096
RANDOM = 6  # random genomes checked per problem, beside the seeds


def _problems() -> list[tuple[str, Any]]:
    import operators

    op = operators.get("rope_cache")
    return [(f"{model} T={t}", op.problem((t, h, k, d, CONTEXT), "bf16"))
            for model, (h, k, d) in MODELS.items() for t in TOKENS]


def measure() -> list[dict[str, Any]]:
    """One row per (problem, contender): a checked genome's status, or a contender's three clocks in µs."""
    import torch

    import operators
    from evo.problem import Target

    op, target = operators.get("rope_cache"), Target.from_torch()
    rows: list[dict[str, Any]] = []
    for label, problem in _problems():
        rows += _measure_problem(op, target, label, problem)
        torch.cuda.empty_cache()
    return rows


def _measure_problem(op: Any, target: Any, label: str, problem: Any) -> list[dict[str, Any]]:
    import numpy as np
    import torch

    from evo.api import as_torch_op
    from evo.evaluate import clocks
    from evo.evaluate.check import run_check
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved

    rng = np.random.default_rng(0)
    genomes = [(f"seed{i}", g) for i, g in enumerate(op.family.seeds(problem, target))]
    genomes += [(f"random{i}", op.family.random(rng, problem, target)) for i in range(RANDOM)]
    inputs = op.make_inputs(problem, 0, "cuda")
    rows: list[dict[str, Any]] = []
    fns: dict[str, Any] = {}
    for name, genome in genomes:
        entry = getattr(load_source(op.render(genome, problem, target)), op.entry)
        checked = run_check(entry, op, problem, seed=1, device="cuda")
        rows.append({"problem": label, "contender": f"evo {name}", "genome": str(genome),
                     "status": checked.status, "error": checked.max_rel_error, "reason": checked.reason})
        if checked.status == "ok" and name.startswith("seed"):
            fns[f"evo {name}"] = (lambda f=entry: f(*inputs))
            if name == "seed0":  # evo's op inside torch.compile: the cache a mutated argument, written in place
                as_op = as_torch_op(entry, op, tag=f"gpu_{problem.shape_text}")
                compiled = torch.compile(lambda *a, f=as_op: f(*a), fullgraph=True)
                fns["evo seed0 in torch.compile"] = (lambda f=compiled: f(*inputs))
    for b in op.baselines():
        fn = b.make(problem)
        fns[b.name] = (lambda f=fn: f(*inputs))
    for fn in fns.values():  # compile and warm every contender before any clock
        fn()
    torch.cuda.synchronize()
    names = list(fns)
    gpu = time_interleaved([fns[n] for n in names], reps=50)
    call = clocks.call_ms([fns[n] for n in names])
    graph = clocks.graph_ms([fns[n] for n in names])
    for n, g, c, r in zip(names, gpu, call, graph, strict=True):
        rows.append({"problem": label, "contender": n, "status": "timed", "gpu_us": g.median_ms * 1e3,
                     "call_us": c * 1e3, "graph_us": None if r is None else r * 1e3})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'problem':22s} {'contender':28s} {'GPU us':>8s} {'call us':>8s} {'graph us':>9s}"]
    for r in rows:
        if r["status"] == "timed":
            graph = "-" if r["graph_us"] is None else f"{r['graph_us']:9.2f}"
            lines.append(f"{r['problem']:22s} {r['contender']:28s} {r['gpu_us']:8.2f} {r['call_us']:8.2f} {graph:>9s}")
    return "\n".join(lines)


def test_rope_cache_is_correct_and_faster_than_the_torch_code_under_graphs():
    from tests.gpu import write_json

    t0 = time.time()
    rows = measure()
    write_json("rope_cache_gpu.json", rows)
    print(f"\n{table(rows)}\n({time.time() - t0:.0f} s)")
    bad = [r for r in rows if r["status"] not in ("ok", "timed")]
    assert not bad, "\n".join(f"{r['problem']} {r['contender']} {r['status']} {r['reason']}: {r['genome']}"
                              for r in bad)
    for label, _ in _problems():
        timed = {r["contender"]: r for r in rows if r["problem"] == label and r["status"] == "timed"}
        evo = min(r["graph_us"] for n, r in timed.items() if n.startswith("evo seed") and "compile" not in n)
        # one launch against the user's ~20 small kernels
        assert evo < timed["torch_eager"]["graph_us"], (label, evo, timed["torch_eager"])


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from tests.gpu import write_json

    measured = measure()
    print(table(measured))
    print(f"rows written to {write_json('rope_cache_gpu.json', measured)}")
    failed = [r for r in measured if r["status"] not in ("ok", "timed")]
    print(json.dumps(failed, indent=1) if failed else "every checked genome correct")
