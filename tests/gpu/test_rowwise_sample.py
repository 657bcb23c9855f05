"""Softmax and RMSNorm genome samples on a real GPU: every kernel that runs must be correct.

For each operator and each benchmark shape (bf16), the family's seeds and a seeded sample of random valid
genomes are rendered for this GPU, compiled by their first launch and checked against the fp32 reference.
Correct kernels are then timed (triton.testing.do_bench, median, L2 flushed), beside torch eager and a
device copy of the same bytes (read M*N, write M*N), for information: the goal is >= 90% of the copy's
bandwidth and >= 1.3x eager. Writes JSON to $EVO_OUT (or /tmp) and prints a table.

    python -m pytest tests/gpu/test_rowwise_sample.py -m gpu -s
    python tests/gpu/test_rowwise_sample.py [--random 16] [--compile] [--ops softmax,rmsnorm]

`--compile` also times torch.compile (default mode; tens of seconds of compiling per shape).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

SHAPES = ((8192, 8192), (32768, 4096), (4096, 32768), (8192, 5000))
DTYPE = "bf16"
SEED = 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _bench(fn: Any) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median"))


def _genomes(op: Any, problem: Any, target: Any, n_random: int) -> list[tuple[str, Any]]:
    import numpy as np

    rng = np.random.default_rng(SEED)
    out = [(f"seed{i:02d}", g) for i, g in enumerate(op.family.seeds(problem, target))]
    seen = {g.hash for _, g in out}
    wanted = len(out) + n_random
    for _ in range(50 * n_random):
        if len(out) >= wanted:
            break
        g = op.family.random(rng, problem, target)
        if g.hash not in seen:
            seen.add(g.hash)
            out.append((f"r{len(out):03d}", g))
    return out


def _run_problem(op: Any, problem: Any, target: Any, n_random: int, time_kernels: bool,
                 time_compile: bool, device: str = "cuda") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import torch

    from evo.evaluate.modules import load_source
    from tests.gpu import search_check

    inputs = op.make_inputs(problem, SEED, device=device)
    ref = op.reference(*inputs)
    tolerance = op.tolerance(problem)
    info: dict[str, Any] = {"problem": problem.key, "bytes": op.bytes(problem)}
    if time_kernels:
        x = inputs[0]
        y = torch.empty_like(x)
        info["copy_ms"] = _bench(lambda: y.copy_(x))
        info["copy_gbs"] = 2 * x.numel() * x.element_size() / info["copy_ms"] / 1e6
        eager = op.baselines()[0].make(problem)
        info["eager_ms"] = _bench(lambda: eager(*inputs))
        if time_compile:
            compiled = op.baselines()[1].make(problem)
            started = time.perf_counter()
            compiled(*inputs)
            info["compile_s"] = time.perf_counter() - started
            info["compile_ms"] = _bench(lambda: compiled(*inputs))
    rows: list[dict[str, Any]] = []
    crashed = False
    for label, genome in _genomes(op, problem, target, n_random):
        row: dict[str, Any] = {"label": label, "problem": problem.key, "genome": genome.canonical(),
                               "text": str(genome)}
        rows.append(row)
        if crashed:  # the CUDA context is gone: nothing after a crash can run
            row["status"] = "not_run"
            continue
        started = time.perf_counter()
        try:
            module = load_source(op.render(genome, problem, target))
            launch = getattr(module, op.entry)
        except Exception as exc:  # noqa: BLE001 - every failure is a row of the report
            row.update(status="compile_failed", reason=_first_line(exc))
            continue
        # the search's own check (evo.evaluate.check): poisoned output, both calls judged, inputs untouched
        status, err, reason, out = search_check(launch, inputs, ref, tolerance, device=device)
        crashed = status == "crashed"
        row.update(status=status, error=err, reason=reason)
        if status in ("crashed", "compile_failed"):
            continue
        row["first_call_s"] = round(time.perf_counter() - started, 3)
        if row["status"] == "correct" and time_kernels:
            ms = _bench(lambda f=launch, o=out: f(*inputs, out=o))
            row.update(ms=ms, gbs=op.throughput(problem, ms), vs_eager=info["eager_ms"] / ms,
                       vs_copy=op.throughput(problem, ms) / info["copy_gbs"])
    return rows, info


def run_sample(ops: tuple[str, ...] = ("softmax", "rmsnorm"), shapes: tuple[tuple[int, int], ...] = SHAPES,
               n_random: int = 12, time_kernels: bool = True, time_compile: bool = False) -> dict[str, Any]:
    import torch
    import triton

    import operators
    from evo.problem import Target

    target = Target.from_torch()
    rows: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for name in ops:
        op = operators.get(name)
        for shape in shapes:
            got, info = _run_problem(op, op.problem(shape, DTYPE), target, n_random, time_kernels, time_compile)
            rows += got
            problems.append(info)
            if any(r["status"] == "crashed" for r in got):
                break
            torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "target": target.name, "num_sms": target.num_sms, "dtype": DTYPE, "problems": problems, "rows": rows}


def summary_table(result: dict[str, Any]) -> str:
    statuses = ("correct", "wrong", "compile_failed", "crashed", "not_run")
    lines = [f"row-wise genome sample on {result['device']} (triton {result['triton']}, torch {result['torch']})",
             f"{'problem':28s} " + " ".join(f"{s[:9]:>9s}" for s in statuses)
             + f" {'copy GB/s':>9s} {'eager':>7s} {'compile':>7s} {'best GB/s':>9s} {'%copy':>6s} {'x eager':>7s}"
             + "  best genome"]
    failures = []
    for info in result["problems"]:
        rows = [r for r in result["rows"] if r["problem"] == info["problem"]]
        counts = [sum(r["status"] == s for r in rows) for s in statuses]
        best = max((r for r in rows if "gbs" in r), key=lambda r: r["gbs"], default=None)
        gbs = lambda ms, n=info["bytes"]: f"{n / ms / 1e6:7.0f}" if ms else f"{'-':>7s}"  # noqa: E731
        line = f"{info['problem']:28s} " + " ".join(f"{c:9d}" for c in counts)
        line += f" {info.get('copy_gbs', 0):9.0f} {gbs(info.get('eager_ms'))} {gbs(info.get('compile_ms'))}"
        if best:
            line += f" {best['gbs']:9.0f} {100 * best['vs_copy']:5.1f}% {best['vs_eager']:7.2f}  {best['text']}"
        lines.append(line)
        failures += [f"  {r['label']} {r['problem']} {r['status']}: {r.get('reason') or r.get('error')} | {r['text']}"
                     for r in rows if r["status"] != "correct"]
    lines.append("(eager/compile columns: GB/s of torch eager / torch.compile on the operator's bytes)")
    if failures:
        lines += ["not correct:"] + failures
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    from tests.gpu import write_json  # here: a script run as a file has the repository on its path only now

    return write_json("rowwise_sample_gpu.json", result)


def test_rowwise_sample_kernels_that_run_are_correct():
    result = run_sample(n_random=8, time_kernels=True)
    path = write_result(result)
    print("\n" + summary_table(result) + f"\n(JSON: {path})")
    ran = [r for r in result["rows"] if r["status"] in ("correct", "wrong", "crashed")]
    assert len(ran) >= 0.9 * len(result["rows"]), "more than a tenth of the sample failed to compile or run"
    bad = [f"{r['label']} {r['problem']} {r['status']} {r.get('reason') or r.get('error')}: {r['text']}"
           for r in ran if r["status"] != "correct"]
    assert not bad, "\n".join(bad)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=12, help="random genomes per problem besides the seeds")
    parser.add_argument("--ops", default="softmax,rmsnorm")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile")
    parser.add_argument("--no-time", action="store_true", help="check only")
    args = parser.parse_args(argv)
    result = run_sample(tuple(args.ops.split(",")), n_random=args.random, time_kernels=not args.no_time,
                        time_compile=args.compile)
    path = write_result(result)
    print(summary_table(result))
    print(f"JSON: {path}")
    return int(any(r["status"] in ("wrong", "crashed") for r in result["rows"]))


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
