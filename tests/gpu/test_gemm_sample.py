"""The seeded GEMM genome sample on a real GPU: every kernel that compiles must be correct.

Each genome of tests.operators.gemm.sample.py (50 random + the targeted ones), and each of the family's
seeds, is repaired for the problem, rendered, compiled ahead in a process pool (the search's compile stage, so the
first launch loads it from Triton's cache) and checked against the fp32
reference in bf16 at 4096x4096x4096, 1000x3000x2000 and 1000x3001x588 (rows of A, B and C that are not 16-byte
multiples: padded rows, Triton's and Gluon's) by the search's own check (evo.evaluate.check);
correct kernels are also timed against cuBLAS (median of triton.testing.do_bench, for information only).
Writes JSON to $EVO_OUT (or /tmp) and prints a table. Run with pytest (`-m gpu`), or as a script from the
repository root:

    python -m tests.gpu.test_gemm_sample        # or: python tests/gpu/test_gemm_sample.py
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

SHAPES = ((4096, 4096, 4096), (1000, 3000, 2000), (1000, 3001, 588))
DTYPE = "bf16"
SEED = 0


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _check(module: Any, a: Any, b: Any, ref: Any, tolerance: float) -> tuple[str, float, str]:
    """(status, relative error, reason) of one rendered module on inputs a, b: the search's own check."""
    from tests.gpu import search_check

    status, err, reason, _ = search_check(module.matmul, (a, b), ref, tolerance, device=str(a.device))
    return status, err, reason


def _sample(family: Any, problem: Any, target: Any) -> list[tuple[str, Any, Any]]:
    """(label, raw genome, the genome repaired for `problem` or None) of the sample and the family's seeds."""
    from tests.operators.gemm.sample import raw_sample, repaired

    genomes = [(f"s{i:02d}", raw) for i, raw in enumerate(raw_sample(family))]
    genomes += [(f"seed{i:02d}", g) for i, g in enumerate(family.seeds(problem, target))]
    return [(label, raw, repaired(family, raw, problem, target)) for label, raw in genomes]


def _precompile(samples: dict[Any, list[tuple[str, Any, Any]]], target: Any) -> None:
    """Compile every kernel of the samples (problem -> _sample's rows) ahead in a process pool (the search's own
    compile stage), so that the checks load each from Triton's cache instead of compiling some 360 kernels one after
    another."""
    import os

    from tests.gpu.precompile import precompile

    items = {(p.sizes, p.dtype, g.canonical()) for p, rows in samples.items() for _, _, g in rows if g is not None}
    precompile([("gemm", sizes, dtype, g, target) for sizes, dtype, g in sorted(items)], min(16, os.cpu_count() or 1))


def _run_problem(op: Any, problem: Any, sample: list[tuple[str, Any, Any]], target: Any, time_kernels: bool,
                 device: str = "cuda") -> list[dict[str, Any]]:
    import torch
    import triton

    from evo.evaluate.compiler import forget_module
    from evo.evaluate.modules import load_source

    a, b = op.make_inputs(problem, SEED, device=device)
    ref = op.reference(a, b)
    tolerance = op.tolerance(problem)
    cublas_ms = triton.testing.do_bench(lambda: torch.matmul(a, b), return_mode="median") if time_kernels else 0.0
    rows: list[dict[str, Any]] = []
    crashed = False
    for label, raw, genome in sample:
        row: dict[str, Any] = {"label": label, "problem": problem.key, "raw": raw.canonical()}
        rows.append(row)
        if genome is None:
            row["status"] = "invalid"
            continue
        row.update(genome=genome.canonical(), genome_hash=genome.hash, text=str(genome))
        if crashed:  # the CUDA context is gone: nothing after a crash can run
            row["status"] = "not_run"
            continue
        print(f"{label} {problem.key} {genome}", end=" ", flush=True)  # a hang shows which kernel it was
        started = time.perf_counter()
        try:
            module = load_source(op.render(genome, problem, target))
        except Exception as exc:  # noqa: BLE001
            row.update(status="render_failed", reason=_first_line(exc))
            print(row["status"], flush=True)
            continue
        status, err, reason = _check(module, a, b, ref, tolerance)
        row.update(first_call_s=round(time.perf_counter() - started, 3), error=err, reason=reason)
        row["status"] = status
        crashed = status == "crashed"
        if status == "correct" and time_kernels:
            ms = triton.testing.do_bench(lambda m=module: m.matmul(a, b), return_mode="median")
            row.update(ms=ms, tflops=op.throughput(problem, ms), vs_cublas=cublas_ms / ms, cublas_ms=cublas_ms)
        print(row["status"], f"{row.get('vs_cublas', 0):.2f}x cuBLAS" if "ms" in row else row.get("reason", ""),
              flush=True)
        forget_module(module)  # its plans hold split-K workspaces: 119 modules kept filled an H100's 80 GB
        del module
        gc.collect()  # the launcher and its module's namespace refer to each other
    return rows


def run_sample(shapes: tuple[tuple[int, int, int], ...] = SHAPES, dtype: str = DTYPE, time_kernels: bool = True
               ) -> dict[str, Any]:
    """Check (and time) the sample on the current GPU; returns the JSON-ready result."""
    import torch
    import triton

    import operators
    from evo.problem import Target

    op = operators.get("gemm")
    target = Target.from_torch()
    problems = [op.problem(shape, dtype) for shape in shapes]
    samples = {p: _sample(op.family, p, target) for p in problems}  # each genome repaired once
    _precompile(samples, target)
    rows: list[dict[str, Any]] = []
    for problem in problems:
        rows += _run_problem(op, problem, samples[problem], target, time_kernels)
        if any(r["status"] == "crashed" for r in rows):
            break  # the CUDA context is gone
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "dtype": dtype, "rows": rows}


def summary_table(result: dict[str, Any]) -> str:
    """Counts per problem (compiled = ran to completion, correct or not), failures listed, best speed-up."""
    columns = {"genomes": lambda r: True, "invalid": lambda r: r["status"] == "invalid",
               "compiled": lambda r: r["status"] in ("correct", "wrong"),
               "compile_failed": lambda r: r["status"] in ("compile_failed", "render_failed"),
               "correct": lambda r: r["status"] == "correct", "wrong": lambda r: r["status"] == "wrong",
               "crashed": lambda r: r["status"] in ("crashed", "not_run")}
    lines = [f"GEMM genome sample on {result['device']} (triton {result['triton']}, torch {result['torch']})",
             f"{'problem':28s}" + "".join(f"{c:>15s}" for c in columns) + f"{'best/cuBLAS':>12s}"]
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in result["rows"]:
        by_problem.setdefault(row["problem"], []).append(row)
    failures = []
    for key, rows in by_problem.items():
        best = max((r.get("vs_cublas", 0.0) for r in rows), default=0.0)
        lines.append(f"{key:28s}" + "".join(f"{sum(map(f, rows)):15d}" for f in columns.values()) + f"{best:12.2f}")
        failures += [f"  {r['label']} {key} {r['status']}: {r.get('reason') or r.get('error')} | {r.get('text')}"
                     for r in rows if r["status"] not in ("invalid", "correct")]
    return "\n".join((["failures (first line of each reason):"] + failures if failures else []) + lines)


def write_result(result: dict[str, Any]) -> Path:
    from tests.gpu import write_json  # here: a script run as a file has the repository on its path only now

    return write_json("gemm_sample_gpu.json", result)


def test_gemm_sample_kernels_that_run_are_correct():
    result = run_sample()
    path = write_result(result)
    print("\n" + summary_table(result) + f"\n(JSON: {path})")
    rows = result["rows"]
    ran = [r for r in rows if r["status"] in ("correct", "wrong", "crashed")]
    assert len({r["raw"] for r in rows if r["label"].startswith("s")}) >= 50
    assert ran, "no kernel ran"
    bad = [f"{r['label']} {r['problem']} {r['status']} {r.get('reason') or r.get('error')}: {r.get('text')}"
           for r in ran if r["status"] != "correct"]
    assert not bad, "\n".join(bad)


def main() -> int:
    result = run_sample()
    path = write_result(result)
    print(f"JSON: {path}")
    print(summary_table(result))
    return int(any(r["status"] in ("wrong", "crashed") for r in result["rows"]))


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
