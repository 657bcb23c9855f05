"""The fused decode operators on a GPU (issue 40 item 3): every kernel that runs must be correct, and the table says how
close each comes to the copy bandwidth and to what it replaces.

- `linear` (y = x @ W^T, W [N, K]) at M in {1, 4, 16} and (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336),
  (6144, 4096)}, bf16, against torch.matmul(x, W.t()) (cuBLAS); goal: >= 85% of the copy bandwidth on W.
- its variants (`+residual`, `+swiglu`, `+rmsnorm`, `+rmsnorm+bias` (Qwen2's qkv), `+rmsnorm+swiglu`) at decode
  shapes, against eager PyTorch;
- `rmsnorm+residual` at (1, 4096), (16, 4096), (2048, 4096), against eager PyTorch;
- a split-K kernel captured in a CUDA graph and replayed on new inputs (its workspace is reset by the kernel itself).

Each problem's genome family seeds (and `--random` seeded random genomes) are rendered for this GPU, checked with the
search's own check (poisoned output, inputs untouched) on bf16, and timed (triton.testing.do_bench, median, L2 flushed)
beside the baseline and a device copy in the same process. No search runs: the best seed is a lower bound on what
`evo run experiments/bench_gemm_decode.yaml` finds. Writes JSON to $EVO_OUT (or /tmp); prints the table last.

    python tests/gpu/test_decode_ops_gpu.py [--random 0] [--budget-s 480] [--compile] [--only linear,...]
    python -m pytest tests/gpu/test_decode_ops_gpu.py -m gpu -s       (a quick subset, checks only what it times)
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

LINEAR_SHAPES = [(m, n, k) for m in (1, 4, 16) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096))]
VARIANT_PROBLEMS = [("linear+residual", (1, 4096, 14336)), ("linear+residual", (16, 4096, 4096)),
                    ("linear+swiglu", (1, 14336, 4096)), ("linear+swiglu", (16, 14336, 4096)),
                    ("linear+rmsnorm", (1, 6144, 4096)), ("linear+rmsnorm+bias", (1, 4608, 3584)),
                    ("linear+rmsnorm+swiglu", (1, 14336, 4096)),
                    ("linear+rmsnorm+swiglu", (16, 14336, 4096)),
                    ("rmsnorm+residual", (1, 4096)), ("rmsnorm+residual", (16, 4096)),
                    ("rmsnorm+residual", (2048, 4096))]
DTYPE = "bf16"
SEED = 0


def _bench(fn: Any) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _genomes(op: Any, problem: Any, target: Any, n_random: int) -> list[tuple[str, Any]]:
    import numpy as np

    out = [(f"seed{i:02d}", g) for i, g in enumerate(op.family.seeds(problem, target))]
    rng = np.random.default_rng(SEED)
    seen = {g.hash for _, g in out}
    wanted = len(out) + n_random
    for _ in range(20 * n_random):
        if len(out) >= wanted:
            break
        g = op.family.random(rng, problem, target)
        if g.hash not in seen:
            seen.add(g.hash)
            out.append((f"r{len(out):03d}", g))
    return out


def copy_gbs() -> float:
    """GB/s of a 1 GiB device copy (read + write), the ceiling the table compares with."""
    import torch

    src = torch.randn(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src))
    return 2 * src.numel() * 4 / ms / 1e6


def run_problem(name: str, sizes: tuple[int, ...], target: Any, n_random: int, deadline: float,
                with_compile: bool = False) -> dict[str, Any]:
    """Check and time the seeds (and random genomes) of one problem beside its primary baseline."""
    import operators
    from evo.evaluate.modules import load_source
    from tests.gpu import search_check

    op = operators.get(name)
    problem = op.problem(sizes, DTYPE)
    inputs = op.make_inputs(problem, SEED, device="cuda")
    ref = op.reference(*inputs)
    baseline = op.baselines()[0]
    base_fn = baseline.make(problem)
    info: dict[str, Any] = {"problem": problem.key, "bytes": op.bytes(problem), "baseline": baseline.name,
                            "baseline_ms": _bench(lambda: base_fn(*inputs)), "rows": []}
    if with_compile:
        compiled = op.bench_baselines()[1].make(problem)
        compiled(*inputs)
        info["compile_ms"] = _bench(lambda: compiled(*inputs))
    for label, genome in _genomes(op, problem, target, n_random):
        row: dict[str, Any] = {"label": label, "genome": str(genome)}
        info["rows"].append(row)
        if time.monotonic() > deadline:
            row["status"] = "not_run"
            continue
        try:
            launch = getattr(load_source(op.render(genome, problem, target)), op.entry)
        except Exception as exc:  # noqa: BLE001 - every failure is a row of the report
            row.update(status="compile_failed", reason=_first_line(exc))
            continue
        status, err, reason, out = search_check(launch, inputs, ref, op.tolerance(problem))
        row.update(status=status, error=err, reason=reason)
        if status == "crashed":
            break  # the CUDA context is gone
        if status == "correct":
            row["ms"] = _bench(lambda f=launch, o=out: f(*inputs, out=o))
    return info


def graph_replay_check() -> str:
    """A split-K linear captured in a CUDA graph, replayed on fresh x three times: '' when every replay is right."""
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    target = Target.from_torch()
    failures = []
    # the two reductions the family allows for a split: tensor-core tiles in ordered slots, FMA tiles by atomics
    for reduction, math in (("atomic", "fma"), ("ordered", "dot")):
        op = operators.get("linear+residual")
        problem = op.problem((4, 4096, 4096), DTYPE)
        genome = op.family.make(op.family.base(math=math, BLOCK_N=64, BLOCK_K=128, SPLIT_K=8, num_stages=3,
                                               reduction=reduction))
        launch = load_source(op.render(genome, problem, target)).linear
        x, w, r = op.make_inputs(problem, 1, device="cuda")
        out = launch(x, w, r)  # plans, compiles and allocates the workspace before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch(x, w, r, out=out)
        for step in range(3):
            x.copy_(torch.randn_like(x))
            graph.replay()
            torch.cuda.synchronize()
            want = op.reference(x, w, r)
            err = float((out.float() - want).norm() / want.norm())
            if not err <= op.tolerance(problem):
                failures.append(f"{reduction} replay {step}: relative error {err:.3g}")
    return "; ".join(failures)


def run_all(n_random: int = 0, budget_s: float = 480.0, with_compile: bool = False,
            problems: list[tuple[str, tuple[int, ...]]] | None = None) -> dict[str, Any]:
    import torch
    import triton

    from evo.problem import Target

    started = time.monotonic()
    target = Target.from_torch()
    todo = problems if problems is not None else [("linear", s) for s in LINEAR_SHAPES] + VARIANT_PROBLEMS
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__, "copy_gbs": copy_gbs(), "problems": []}
    for name, sizes in todo:
        result["problems"].append(run_problem(name, sizes, target, n_random, started + budget_s, with_compile))
        torch.cuda.empty_cache()
    result["graph_replay"] = graph_replay_check()
    return result


def _best(info: dict[str, Any]) -> dict[str, Any] | None:
    return min((r for r in info["rows"] if "ms" in r), key=lambda r: r["ms"], default=None)


def summary_table(result: dict[str, Any]) -> str:
    copy = result["copy_gbs"]
    lines = [f"decode operators on {result['device']} (triton {result['triton']}, torch {result['torch']}); "
             f"copy {copy:.0f} GB/s (read + write)",
             f"{'problem':34s} {'baseline':>8s} {'base us':>8s} {'evo us':>8s} {'evo GB/s':>8s} {'%copy':>6s} "
             f"{'x base':>6s} {'compile':>8s} {'ok/run':>7s}  best genome"]
    failures = []
    for info in result["problems"]:
        best = _best(info)
        ran = [r for r in info["rows"] if r["status"] != "not_run"]
        ok = sum(r["status"] == "correct" for r in ran)
        line = f"{info['problem']:34s} {info['baseline']:>8s} {1e3 * info['baseline_ms']:8.1f} "
        if best:
            gbs = info["bytes"] / best["ms"] / 1e6
            line += (f"{1e3 * best['ms']:8.1f} {gbs:8.0f} {100 * gbs / copy:5.1f}% "
                     f"{info['baseline_ms'] / best['ms']:6.2f} ")
        else:
            line += f"{'-':>8s} {'-':>8s} {'-':>6s} {'-':>6s} "
        line += f"{1e3 * info['compile_ms']:8.1f} " if "compile_ms" in info else f"{'-':>8s} "
        line += f"{ok:3d}/{len(ran):<3d}  {best['genome'] if best else ''}"
        lines.append(line)
        failures += [f"  {info['problem']} {r['label']} {r['status']}: {r.get('reason') or r.get('error')} | "
                     f"{r['genome']}" for r in ran if r["status"] != "correct"]
    lines.append("(us: median GPU time, L2 flushed; GB/s: the operator's bytes, W dominating; compile: torch.compile "
                 "max-autotune-no-cudagraphs, with --compile)")
    lines.append(f"CUDA graph replay of split-K linear: {result['graph_replay'] or 'correct'}")
    if failures:
        lines += ["not correct:"] + failures
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    from tests.gpu import write_json  # here: a script run as a file has the repository on its path only now

    return write_json("decode_ops_gpu.json", result)


def test_decode_operators_are_correct_and_timed():
    quick = [("linear", (1, 4096, 4096)), ("linear", (16, 14336, 4096)), ("linear+rmsnorm+swiglu", (1, 14336, 4096)),
             ("linear+residual", (4, 4096, 14336)), ("rmsnorm+residual", (1, 4096)), ("rmsnorm+residual", (16, 5000))]
    result = run_all(n_random=4, budget_s=300, problems=quick)
    path = write_result(result)
    print("\n" + summary_table(result) + f"\n(JSON: {path})")
    rows = [r for info in result["problems"] for r in info["rows"] if r["status"] != "not_run"]
    bad = [f"{r['label']} {r['status']}: {r.get('reason') or r.get('error')} | {r['genome']}" for r in rows
           if r["status"] != "correct"]
    assert not bad, "\n".join(bad)
    assert not result["graph_replay"], result["graph_replay"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=0, help="random genomes per problem besides the seeds")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop starting kernels after this many seconds")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile max-autotune per problem")
    parser.add_argument("--only", default="", help="only the operators named, comma-separated (e.g. linear)")
    args = parser.parse_args(argv)
    problems = [("linear", s) for s in LINEAR_SHAPES] + VARIANT_PROBLEMS
    if args.only:
        problems = [(name, s) for name, s in problems if name in args.only.split(",")]
    result = run_all(args.random, args.budget_s, args.compile, problems)
    path = write_result(result)
    print(f"JSON: {path}")
    print(summary_table(result))
    rows = [r for info in result["problems"] for r in info["rows"]]
    return int(any(r["status"] in ("wrong", "crashed") for r in rows) or bool(result["graph_replay"]))


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
