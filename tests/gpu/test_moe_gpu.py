"""The MoE expert GEMMs on a GPU (issue 45 item 1): every kernel that runs must be correct, and the table says how each
problem's best seed compares with the torch ways a user has.

- `moe_gate_up` (silu(x Wg^T) * (x Wu^T) per routed slot, gate_up_proj [E, 2N, K]) and `moe_down` (the down projection,
  routing weights applied, top-k rows summed per token) at Mixtral-8x7B's shapes (E 8, top-2, hidden 4096,
  intermediate 14336) and Qwen1.5-MoE-A2.7B's (E 60, top-4, hidden 2048, intermediate 1408), T in {1, 4, 16, 2048},
  bf16, the routing Mixtral's router makes from random logits;
- against transformers' eager loop over the experts hit, torch.compile of it (--compile, or the pytest subset), and
  torch._grouped_mm over the slots sorted by expert; a contender that cannot run is a row with its reason;
- moe_down's in-kernel combine captured in a CUDA graph and replayed on new inputs (its counters reset by the kernel),
  and run twice bit for bit (no float atomics).

Each problem's genome family seeds (and `--random` seeded random genomes) are rendered for this GPU, checked with the
search's own check and timed (triton.testing.do_bench, median, L2 flushed) beside the contenders in the same process.
No search runs: the best seed is a lower bound on what `evo run experiments/moe_gate_up.yaml` finds. Goals (issue 45):
>= 1.3x the best torch way at 1-16 tokens, >= 1.1x at 2048. Writes JSON to $EVO_OUT (or /tmp); prints the table last.

    python tests/gpu/test_moe_gpu.py [--random 0] [--budget-s 480] [--compile] [--only moe_down]
    python -m pytest tests/gpu/test_moe_gpu.py -m gpu -s       (a quick subset; asserts every kernel it ran is right)
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

MIXTRAL = (8, 2, 14336, 4096)  # E, top-k, intermediate, hidden
QWEN_MOE = (60, 4, 1408, 2048)
TOKENS = (1, 4, 16, 2048)
DTYPE = "bf16"
SEED = 0


def problems_of(model: tuple[int, int, int, int], tokens: tuple[int, ...]) -> list[tuple[str, tuple[int, ...]]]:
    e, k, inter, hidden = model
    return [p for t in tokens
            for p in (("moe_gate_up", (t, e, k, inter, hidden)), ("moe_down", (t, e, k, hidden, inter)))]


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


def time_contenders(op: Any, problem: Any, inputs: tuple[Any, ...], ref: Any, with_compile: bool) -> dict[str, Any]:
    """Median ms of each torch way (or why it did not run, or that it was wrong)."""
    out: dict[str, Any] = {}
    for baseline in op.bench_baselines():
        if baseline.name == "torch_compile" and not with_compile:
            out[baseline.name] = {"skipped": "not asked (--compile)"}
            continue
        try:
            fn = baseline.make(problem)
            got = fn(*inputs)
            err = float((got.float() - ref).norm() / ref.norm())
            if not err <= op.tolerance(problem):
                out[baseline.name] = {"wrong": f"relative error {err:.3g}"}
                continue
            out[baseline.name] = {"ms": _bench(lambda f=fn: f(*inputs))}
        except Exception as exc:  # noqa: BLE001 - every contender that cannot run is a row with its reason
            out[baseline.name] = {"skipped": _first_line(exc)}
    return out


def run_problem(name: str, sizes: tuple[int, ...], target: Any, n_random: int, deadline: float,
                with_compile: bool) -> dict[str, Any]:
    import operators
    from evo.evaluate.modules import load_source
    from tests.gpu import search_check

    op = operators.get(name)
    problem = op.problem(sizes, DTYPE)
    inputs = op.make_inputs(problem, SEED, device="cuda")
    ref = op.reference(*inputs)
    info: dict[str, Any] = {"problem": problem.key, "contenders": time_contenders(op, problem, inputs, ref,
                                                                                   with_compile), "rows": []}
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


def combine_checks() -> str:
    """moe_down's in-kernel combine: bit-identical twice, and right in a CUDA graph replayed on fresh h and routing
    weights ('' when all hold)."""
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    op = operators.get("moe_down")
    problem = op.problem((16, 8, 2, 4096, 14336), DTYPE)
    genome = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, swap_ab=True, num_stages=4))
    launch = load_source(op.render(genome, problem, Target.from_torch())).moe_down
    h, w, ids, rw = op.make_inputs(problem, 1, device="cuda")
    failures = []
    first, second = launch(h, w, ids, rw), launch(h, w, ids, rw)
    if not torch.equal(first, second):
        failures.append("two runs differ")
    out = launch(h, w, ids, rw)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(h, w, ids, rw, out=out)
    for step in range(3):
        h.copy_(torch.randn_like(h))
        rw.copy_(torch.rand_like(rw))
        graph.replay()
        torch.cuda.synchronize()
        want = op.reference(h, w, ids, rw)
        err = float((out.float() - want).norm() / want.norm())
        if not err <= op.tolerance(problem):
            failures.append(f"replay {step}: relative error {err:.3g}")
    return "; ".join(failures)


def run_all(n_random: int = 0, budget_s: float = 480.0, with_compile: bool = False,
            problems: list[tuple[str, tuple[int, ...]]] | None = None) -> dict[str, Any]:
    import torch
    import triton

    from evo.problem import Target

    started = time.monotonic()
    target = Target.from_torch()
    todo = problems if problems is not None else problems_of(MIXTRAL, TOKENS) + problems_of(QWEN_MOE, (16, 2048))
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__, "problems": []}
    for name, sizes in todo:
        result["problems"].append(run_problem(name, sizes, target, n_random, started + budget_s, with_compile))
        torch.cuda.empty_cache()
    result["combine"] = combine_checks()
    return result


def summary_table(result: dict[str, Any]) -> str:
    ways = ("eager", "torch_compile", "grouped_mm")
    lines = [f"MoE expert GEMMs on {result['device']} (triton {result['triton']}, torch {result['torch']}), {DTYPE}",
             f"{'problem':38s} " + " ".join(f"{w + ' us':>17s}" for w in ways)
             + f" {'evo us':>8s} {'x best':>6s} {'goal':>5s} {'ok/run':>7s}  best genome"]
    notes, failures = [], []
    for info in result["problems"]:
        best = min((r for r in info["rows"] if "ms" in r), key=lambda r: r["ms"], default=None)
        ran = [r for r in info["rows"] if r["status"] != "not_run"]
        cells, timed = [], []
        for w in ways:
            c = info["contenders"].get(w, {})
            if "ms" in c:
                cells.append(f"{1e3 * c['ms']:17.1f}")
                timed.append(c["ms"])
            else:
                cells.append(f"{'skipped' if 'skipped' in c else 'wrong':>17s}")
                notes.append(f"  {info['problem']} {w}: {c.get('skipped') or c.get('wrong')}")
        tokens = int(info["problem"].split(":")[1].split("x")[0])
        goal = 1.3 if tokens <= 16 else 1.1
        line = f"{info['problem']:38s} " + " ".join(cells)
        if best and timed:
            line += f" {1e3 * best['ms']:8.1f} {min(timed) / best['ms']:6.2f} {goal:5.1f}"
        else:
            line += f" {'-':>8s} {'-':>6s} {goal:5.1f}"
        lines.append(line + f" {sum(r['status'] == 'correct' for r in ran):3d}/{len(ran):<3d}  "
                     f"{best['genome'] if best else ''}")
        failures += [f"  {info['problem']} {r['label']} {r['status']}: {r.get('reason') or r.get('error')} | "
                     f"{r['genome']}" for r in ran if r["status"] != "correct"]
    lines.append("(us: median GPU time, L2 flushed, routing sort included; x best: the best torch way that ran over "
                 "evo's best seed)")
    lines.append("moe_down's in-kernel combine (twice bit for bit, CUDA graph replays): "
                 f"{result['combine'] or 'correct'}")
    if notes:
        lines += ["contenders not timed:"] + notes
    if failures:
        lines += ["not correct:"] + failures
    return "\n".join(lines)


def write_result(result: dict[str, Any]) -> Path:
    from tests.gpu import write_json  # here: a script run as a file has the repository on its path only now

    return write_json("moe_gpu.json", result)


def test_moe_kernels_are_correct_and_timed():
    quick = problems_of(MIXTRAL, (1, 16, 2048)) + problems_of(QWEN_MOE, (16,))
    result = run_all(n_random=2, budget_s=400, with_compile=False, problems=quick)
    path = write_result(result)
    print("\n" + summary_table(result) + f"\n(JSON: {path})")
    rows = [r for info in result["problems"] for r in info["rows"] if r["status"] != "not_run"]
    assert rows and any(r["status"] == "correct" for r in rows)
    bad = [f"{r['label']} {r['status']}: {r.get('reason') or r.get('error')} | {r['genome']}" for r in rows
           if r["status"] != "correct"]
    assert not bad, "\n".join(bad)
    assert not result["combine"], result["combine"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=0, help="random genomes per problem besides the seeds")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop starting kernels after this many seconds")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile of the eager loop")
    parser.add_argument("--only", default="", help="only the operators named, comma-separated (e.g. moe_down)")
    parser.add_argument("--tokens", default="", help="only these token counts, comma-separated (e.g. 1,16)")
    args = parser.parse_args(argv)
    tokens = tuple(int(t) for t in args.tokens.split(",") if t) or TOKENS
    problems = problems_of(MIXTRAL, tokens) + problems_of(QWEN_MOE, tuple(t for t in tokens if t in (16, 2048)))
    if args.only:
        problems = [(name, s) for name, s in problems if name in args.only.split(",")]
    result = run_all(args.random, args.budget_s, args.compile, problems)
    path = write_result(result)
    print(f"JSON: {path}")
    print(summary_table(result))
    rows = [r for info in result["problems"] for r in info["rows"]]
    return int(any(r["status"] in ("wrong", "crashed") for r in rows) or bool(result["combine"]))


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
