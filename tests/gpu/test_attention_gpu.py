"""Attention kernels on a real GPU: every sampled genome correct, and the family's seeds timed beside SDPA's backends.

The interpreter runs one program at a time, so what only concurrency can break is checked here: the split-key
partials combined by the last program of a tile (an atomic ticket; its counters must be reset for the next call,
which a second check after hundreds of timed calls shows). The sample: decode (one query, GQA), speculative
decode (a few causal queries), prefill causal and not, head dims 64, 80 and 128, bf16 and fp16; each problem's
seeds and a seeded sample of random genomes, judged by the search's own check against the fp32 reference.

With `--time` the seeds of a few LLM problems are also timed (median, L2 flushed, interleaved) beside SDPA as a
user calls it and each SDPA backend forced alone; a backend that cannot run a problem is listed with its reason.
These are the family's starting points, not a search's elites.

    python -m pytest tests/gpu/test_attention_gpu.py -m gpu -s
    python tests/gpu/test_attention_gpu.py [--time] [--budget-s S]     # as a table, JSON to $EVO_OUT
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
SEED = 0
CHECKED = (  # (operator, sizes, dtype): correctness of seeds and random genomes
    ("attention", (4, 32, 8, 1, 4096, 128), "bf16"),
    ("attention+causal", (2, 16, 2, 5, 1000, 80), "fp16"),
    ("attention+causal", (1, 8, 8, 333, 333, 64), "bf16"),
    ("attention", (2, 12, 4, 200, 777, 128), "fp16"),
)
TIMED = (  # (operator, sizes, dtype): the seeds timed against SDPA
    ("attention", (8, 32, 8, 1, 8192, 128), "bf16"),
    ("attention", (1, 32, 8, 1, 131072, 128), "bf16"),
    ("attention+causal", (1, 32, 8, 4096, 4096, 128), "bf16"),
    ("attention", (1, 32, 32, 8192, 8192, 128), "bf16"),
    ("attention+causal", (2, 32, 32, 2048, 2048, 64), "bf16"),
)


def _genomes(op: Any, problem: Any, target: Any, n_random: int) -> list[tuple[str, Any]]:
    import numpy as np

    out = [(f"seed{i:02d}", g) for i, g in enumerate(op.family.seeds(problem, target))]
    rng = np.random.default_rng(SEED)
    out += [(f"r{i:02d}", op.family.random(rng, problem, target)) for i in range(n_random)]
    seen: set[str] = set()
    return [(label, g) for label, g in out if not (g.hash in seen or seen.add(g.hash))]


def precompile(problems: tuple, n_random: int, target: Any, workers: int) -> dict[str, tuple[str, str, dict]]:
    """Compile every genome of the sample ahead, in `workers` processes, as a search's compile pool does: the checks
    then load the kernels from Triton's cache. (problem key)/(genome hash) -> (status, reason, resources)."""
    import operators
    from tests.gpu.precompile import precompile as pool_compile

    items = []
    for name, sizes, dtype in problems:
        op = operators.get(name)
        problem = op.problem(sizes, dtype)
        items += [(name, sizes, dtype, g.canonical(), target) for _, g in _genomes(op, problem, target, n_random)]
    return pool_compile(items, workers)


def child_sample(problems: tuple, n_random: int, time_kernels: bool, budget_s: float, device: str = "cuda",
                 compiled: dict[str, tuple[str, str, dict]] | None = None) -> list[dict[str, Any]]:
    """Check (and time) the sample in this process; one JSON row per kernel and per baseline, printed as it comes.
    A genome that `compiled` says the compile stage rejects (too many registers spilled, ...) is a row, unchecked."""
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import HOPPER, Target
    from tests.gpu import search_check

    target = Target.from_torch() if device == "cuda" else HOPPER
    rows: list[dict[str, Any]] = []
    start = time.time()
    for name, sizes, dtype in problems:
        if time.time() - start > budget_s:
            rows.append({"problem": f"{name}:{'x'.join(map(str, sizes))}:{dtype}", "label": "-",
                         "status": "skipped", "reason": f"past the script's {budget_s:g} s"})
            print(json.dumps(rows[-1]), flush=True)
            continue
        op = operators.get(name)
        problem = op.problem(sizes, dtype)
        inputs = op.make_inputs(problem, SEED, device=device)
        ref = op.reference(*inputs)
        timed: list[tuple[dict[str, Any], Any, Any]] = []
        for label, genome in _genomes(op, problem, target, n_random):
            row = {"problem": problem.key, "label": label, "genome": str(genome)}
            status, reason, resources = (compiled or {}).get(f"{problem.key}/{genome.hash}", ("ok", "", {}))
            row["resources"] = {k: resources.get(k) for k in ("registers", "shared", "spills")}
            if status != "ok":
                row.update(status=f"compile:{status}", reason=reason)
                rows.append(row)
                print(json.dumps(row), flush=True)
                continue
            t0 = time.time()
            launch = getattr(load_source(op.render(genome, problem, target)), op.entry)
            status, err, reason, out = search_check(launch, inputs, ref, op.tolerance(problem), device)
            row.update(status=status, error=err, reason=reason, check_s=round(time.time() - t0, 2))
            rows.append(row)
            print(json.dumps(row), flush=True)
            if status == "crashed":
                return rows
            if status == "correct" and time_kernels:
                timed.append((row, lambda f=launch, o=out, i=inputs: f(*i, out=o), out))
        if time_kernels and timed:
            contenders = []
            for b in op.bench_baselines():
                try:
                    fn = b.make(problem)
                    fn(*inputs)
                    torch.cuda.synchronize()
                    contenders.append(({"problem": problem.key, "label": b.name, "status": "baseline"},
                                       lambda f=fn, i=inputs: f(*i), None))
                except Exception as e:  # noqa: BLE001 - a backend that cannot run this problem is a row
                    rows.append({"problem": problem.key, "label": b.name, "status": "unavailable",
                                 "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
            everyone = timed + contenders
            for (row, _, _), t in zip(everyone, time_interleaved([fn for _, fn, _ in everyone], reps=20), strict=True):
                row.update(ms=t.median_ms, tflops=op.throughput(problem, t.median_ms),
                           gbs=op.bytes(problem) / (t.median_ms * 1e-3) / 1e9)
            rows += [row for row, _, _ in contenders]
            for row, _, _ in contenders:
                print(json.dumps(row), flush=True)
            # after hundreds of calls, the last program's counters were reset every time: the output is still right
            for row, fn, out in timed:
                if "reduce=last_program" in row["genome"]:
                    out.zero_()
                    fn()
                    torch.cuda.synchronize()
                    row["after_timing_error"] = float(((out.float() - ref).norm() / ref.norm()).item())
        inputs = ref = None  # free the GPU memory before the next problem
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def _table(rows: list[dict[str, Any]]) -> str:
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_problem.setdefault(r["problem"], []).append(r)
    lines = [f"{'problem':40s} {'evo seed ms':>11s} {'TFLOP/s':>8s} {'GB/s':>6s} {'sdpa':>8s} {'flash':>8s} "
             f"{'efficient':>9s} {'cudnn':>8s} {'vs best':>7s}"]
    for key, rs in by_problem.items():
        evo = [r for r in rs if r.get("status") == "correct" and "ms" in r]
        base = {r["label"]: r.get("ms") for r in rs if r["status"] in ("baseline", "unavailable")}
        if not evo:
            continue
        best = min(evo, key=lambda r: r["ms"])
        known = [ms for ms in base.values() if ms]
        cells = [f"{base.get(n) or float('nan'):8.3f}" for n in ("sdpa", "sdpa_flash")]
        cells += [f"{base.get('sdpa_efficient') or float('nan'):9.3f}",
                  f"{base.get('sdpa_cudnn') or float('nan'):8.3f}"]
        ratio = min(known) / best["ms"] if known else float("nan")
        lines.append(f"{key:40s} {best['ms']:11.3f} {best['tflops']:8.1f} {best['gbs']:6.0f} {' '.join(cells)} "
                     f"{ratio:6.2f}x  ({best['label']})")
    return "\n".join(lines)


def test_attention_sample_is_correct():
    from tests.gpu import run_child, write_json

    rows = run_child(Path(__file__).resolve(), ["--child", "--random", "4"], timeout_s=540)
    write_json("attention_gpu.json", rows)
    assert {r["problem"].split(":")[1] for r in rows} == {"x".join(map(str, s)) for _, s, _ in CHECKED}
    bad = [r for r in rows if r["status"] != "correct"]
    assert not bad, "\n".join(f"{r['problem']} {r['label']} {r['status']} {r['reason']}: {r['genome']}" for r in bad)
    assert any("reduce=last_program" in r["genome"] for r in rows) and any("pack_gqa=True" in r["genome"] for r in rows)


def main(argv: list[str]) -> int:
    budget = float(argv[argv.index("--budget-s") + 1]) if "--budget-s" in argv else 1e9
    n_random = int(argv[argv.index("--random") + 1]) if "--random" in argv else 4
    if "--child" in argv:
        child_sample(CHECKED, n_random, time_kernels=False, budget_s=budget)
        return 0
    import os

    from evo.problem import Target
    from tests.gpu import write_json

    t0 = time.time()
    target = Target.from_torch()
    timed = TIMED if "--time" in argv else ()
    compiled = {**precompile(CHECKED, n_random, target, min(16, os.cpu_count() or 1)),
                **precompile(timed, 0, target, min(16, os.cpu_count() or 1))}
    print(f"compiled {len(compiled)} kernels ahead in {time.time() - t0:.0f} s: "
          f"{sum(s == 'ok' for s, _, _ in compiled.values())} fit the GPU", flush=True)
    rows = child_sample(CHECKED, n_random, time_kernels=False, budget_s=budget, compiled=compiled)
    rows += child_sample(timed, 0, time_kernels=True, budget_s=budget, compiled=compiled)
    import torch
    import triton

    gpu = torch.cuda.get_device_name()
    path = write_json("attention_gpu.json", {"gpu": gpu, "torch": torch.__version__, "triton": triton.__version__,
                                             "note": "seeds of the attention family (no search) beside SDPA",
                                             "rows": rows})
    print(f"GPU: {gpu}, torch {torch.__version__}, triton {triton.__version__}")
    bad = [r for r in rows if r["status"] not in ("correct", "baseline", "unavailable", "skipped")
           and not r["status"].startswith("compile:out_of_resources")]
    for r in bad:
        print(f"NOT CORRECT {r['problem']} {r['label']} {r['status']} {r.get('reason')}: {r.get('genome')}")
    drift = [r for r in rows if r.get("after_timing_error", 0) > 0.05]
    for r in drift:
        print(f"WRONG AFTER TIMING {r['problem']} {r['label']} {r['after_timing_error']:.3g}: {r['genome']}")
    print(f"{sum(r['status'] == 'correct' for r in rows)} correct of "
          f"{sum(r['status'] in ('correct', 'wrong', 'crashed', 'compile_failed') for r in rows)} kernels; "
          f"JSON: {path}")
    print(_table(rows))
    return int(bool(bad or drift))


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
