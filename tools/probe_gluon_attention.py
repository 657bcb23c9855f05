"""GPU probe: the Gluon rendering of the attention genome (backend=gluon) against SDPA's backends and evo's Triton
rendering.

For each problem (operator:BxHqxHkvxLqxLkxD:dtype), in one process on one GPU: every valid Gluon genome of a small
grid (tiles, ring depth, warps, one or two consumers, overlap, ping-pong, persistent) checked on a NaN-poisoned
output against the fp32 reference, and timed interleaved with SDPA's cuDNN backend (evo.evaluate.timing: L2
flushed, CUDA events, medians); then the best three Gluon kernels, the committed attention bench's elite where it
is a Triton kernel (else the family's first Triton seed), and SDPA with the cuDNN and the flash backends timed
together. Writes $EVO_OUT/probe_gluon_attention.json after every kernel and prints a table last.

    python tools/probe_gluon_attention.py [--quick] [--jobs=N] [operator:shape:dtype ...]

The kernels are compiled ahead in N processes (default: the machine's CPUs, at most 16), as a search does.

--quick checks correctness only (no timing), for small problems: a kernel that deadlocks hangs the process, so
run small shapes first under `timeout`.
"""

from __future__ import annotations

import itertools
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

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["attention:1x32x8x8192x8192x128:bf16", "attention+causal:1x32x8x8192x8192x128:bf16"]


def _grid(op: Any, problem: Any, target: Any) -> list[dict[str, Any]]:
    from genomes.attention_gluon import GLUON_FIXED

    causal = "causal" in problem.operator
    out = []
    for bm, bn, st, w, c, ov, pp, ps in itertools.product((64, 128), (64, 128), (2, 3, 4), (4, 8), (1, 2, 3),
                                                          (False, True), (False, True), (0, 1)):
        if ps and not (c == 2 and ov):  # the persistent grid is swept on the schedules that won without it
            continue
        values = {**op.family.base(), **GLUON_FIXED, "backend": "gluon", "BLOCK_M": bm, "BLOCK_N": bn,
                  "num_stages": st, "num_warps": w, "consumers": c, "overlap": ov, "pingpong": pp, "persistent": ps,
                  "q_order": "reverse" if causal else "forward"}
        if not op.family.violations(op.family.make(values), problem, target):
            out.append(values)
    return out


def _triton_elite(op: Any, problem: Any, target: Any) -> dict[str, Any]:
    name = "attention-causal" if "causal" in problem.operator else "attention"
    path = ROOT / "reports/bench" / f"{name}-nvidia-h100-80gb-hbm3.json"
    rows = json.loads(path.read_text())["problems"] if path.exists() else []
    row = next((r for r in rows if r["key"] == problem.key), None)
    if row and row["evo_genome"].get("backend", "triton") == "triton":
        return {**op.family.base(), **row["evo_genome"]}
    return next(s for s in op.family.seeds(problem, target) if s["backend"] == "triton").as_dict()


def probe(key: str, quick: bool, out_path: Path, results: list[dict[str, Any]], jobs: int = 1) -> dict[str, Any]:
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved
    from evo.problem import Target

    name, shape_text, dtype = key.split(":")
    op, target = operators.get(name), Target.from_torch()
    problem = op.problem(tuple(int(x) for x in shape_text.split("x")), dtype)
    q, k, v = op.make_inputs(problem, 0, device="cuda")[:3]
    ref = op.reference(q, k, v)
    tol = op.tolerance(problem)
    rivals = {b.name: b.make(problem) for b in op.bench_baselines() if b.name in ("sdpa_cudnn", "sdpa_flash")}
    cudnn = lambda: rivals["sdpa_cudnn"](q, k, v)  # noqa: E731
    tflops = lambda ms: op.flops(problem) / ms / 1e9  # noqa: E731
    print(f"== {problem.key}", file=sys.stderr, flush=True)
    entry_of: dict[str, Any] = {"problem": problem.key, "gpu": torch.cuda.get_device_name(), "rows": []}
    results.append(entry_of)
    rows, calls = entry_of["rows"], {}
    candidates = [("gluon", g) for g in _grid(op, problem, target)] + [("triton", _triton_elite(op, problem, target))]
    if jobs > 1:  # compile ahead in a process pool: the checks below then load each kernel from Triton's cache
        from tests.gpu.precompile import precompile

        started = time.time()
        items = [(name, problem.sizes, dtype, op.family.make(v).canonical(), target) for _, v in candidates]
        done = precompile(items, jobs)
        print(f"   compiled {len(done)} kernels ahead in {time.time() - started:.0f} s", file=sys.stderr, flush=True)
    for kind, values in candidates:
        genome = op.family.make(values)
        entry: dict[str, Any] = {"kind": kind, "genome": genome.as_dict(), "hash": genome.hash}
        try:
            module = load_source(op.render(genome, problem, target))
            out = torch.full_like(q, float("nan"))
            module.attention(q, k, v, out=out)
            torch.cuda.synchronize()
            err = float((out.float() - ref).norm() / ref.norm())
            entry["err"] = err
            entry["status"] = "ok" if err == err and err <= tol else f"wrong: relative error {err:.3g} > {tol}"
        except Exception as exc:  # noqa: BLE001 - a probe reports and goes on
            entry["status"] = f"error: {type(exc).__name__}: {str(exc)[:400]}"
        if entry["status"] == "ok" and not quick:
            fn = lambda m=module, o=out: m.attention(q, k, v, out=o)  # noqa: E731
            t = time_interleaved([cudnn, fn], reps=10)
            entry["ms"], entry["vs_cudnn"] = t[1].median_ms, t[0].median_ms / t[1].median_ms
            calls[genome.hash] = fn
        g = genome.as_dict()
        print(f"   {kind:6s} {g['BLOCK_M']}x{g['BLOCK_N']} st{g['num_stages']} w{g['num_warps']} c{g['consumers']} "
              f"ov{int(g['overlap'])} pp{int(g['pingpong'])} ps{g['persistent']}: {entry['status'][:140]} "
              f"{entry.get('vs_cudnn', 0):.3f}", file=sys.stderr, flush=True)
        rows.append(entry)
        out_path.write_text(json.dumps(results, indent=1))
    if quick:
        return entry_of
    ranked = {kind: sorted((e for e in rows if "ms" in e and e["kind"] == kind), key=lambda e: e["ms"])
              for kind in ("gluon", "triton")}
    final = {"cudnn": cudnn, "flash": lambda: rivals["sdpa_flash"](q, k, v)}
    for kind, best in ranked.items():
        for i, e in enumerate(best[:3 if kind == "gluon" else 1]):
            final[f"{kind}{i}"] = calls[e["hash"]]
    timings = time_interleaved(list(final.values()), reps=30)
    base = timings[0].median_ms
    entry_of.update({
        "final_ms": {k: t.median_ms for k, t in zip(final, timings, strict=True)},
        "final_tflops": {k: round(tflops(t.median_ms), 1) for k, t in zip(final, timings, strict=True)},
        "final_vs_cudnn": {k: round(base / t.median_ms, 3) for k, t in zip(final, timings, strict=True)},
        "best": {k: v[:3] for k, v in ranked.items()}})
    out_path.write_text(json.dumps(results, indent=1))
    return entry_of


def main(argv: list[str]) -> int:
    import os

    if __package__ in (None, ""):
        sys.path.insert(0, str(ROOT))
    out = Path(os.environ.get("EVO_OUT") or "/tmp")
    out.mkdir(parents=True, exist_ok=True)
    quick = "--quick" in argv
    jobs = next((int(a.split("=")[1]) for a in argv if a.startswith("--jobs=")), min(16, os.cpu_count() or 1))
    path = out / ("probe_gluon_attention_quick.json" if quick else "probe_gluon_attention.json")
    results: list[dict[str, Any]] = []
    for key in [a for a in argv if not a.startswith("--")] or DEFAULT:
        probe(key, quick, path, results, jobs)
    for r in results:
        wrong = [e for e in r["rows"] if e["status"] != "ok"]
        print(f"{r['problem']}: {len(r['rows']) - len(wrong)} of {len(r['rows'])} ok")
        if "final_vs_cudnn" in r:
            print("   " + "  ".join(f"{k}={v:.3f}" for k, v in r["final_vs_cudnn"].items())
                  + f"  (TFLOP/s {r['final_tflops']})")
            for kind, best in r["best"].items():
                if best:
                    g = best[0]["genome"]
                    print(f"   best {kind}: {g['BLOCK_M']}x{g['BLOCK_N']} st{g['num_stages']} w{g['num_warps']} "
                          f"c{g['consumers']} ov{int(g['overlap'])} pp{int(g['pingpong'])} ps{g['persistent']} "
                          f"{g['backend']}")
        for e in wrong[:6]:
            print(f"   not ok: {e['status'][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
