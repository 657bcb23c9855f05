"""The CPU smoke evaluator, for machines without a GPU: correctness in the Triton interpreter at a tiny
problem size, and a fitness that is plainly NOT a timing.

Each genome is rendered again for a small version of its problem (`smoke_problem`) and checked against the
operator's reference as on a GPU (evo.evaluate.check). The fitness is `Operator.smoke_cost(genome, problem)`, a
deterministic model estimate for the real problem, and every row says so (gpu SMOKE_GPU, baseline
"smoke-roofline", reason SMOKE_NOTE). The child runs with TRITON_INTERPRET=1 under the GPU worker's supervision
(evo.evaluate.worker.ChildWorker), so a kernel that loops forever in the interpreter times out as on a GPU.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from evo.evaluate.backend import Worker, WorkerInfo
from evo.evaluate.candidate import Candidate
from evo.evaluate.check import run_check
from evo.evaluate.faults import classify
from evo.evaluate.modules import load_source
from evo.evaluate.worker import ChildWorker, GpuBackend
from evo.problem import INTERPRETED_HOPPER, Problem, Target
from evo.store.record import Evaluation

__all__ = ["SmokeBackend", "SmokeWorker", "SMOKE_GPU", "SMOKE_NOTE", "smoke_problem", "smoke_setup", "smoke_evaluate"]

SMOKE_GPU = "cpu-interpreter"
SMOKE_NOTE = "smoke: fitness is a model estimate, not a timing"
SMOKE_SIZES = (64, 128, 256)


def smoke_problem(operator: Any, genome: Any, problem: Problem, target: Target) -> Problem:
    """The smallest clipped version of `problem` (dims <= 64, else 128, else 256) that `genome` can run, with
    fp16 for bf16 (bf16 arithmetic is broken in the interpreter). Raises ValueError when none is valid."""
    dtype = problem.dtype
    if dtype == "bf16" and "fp16" in operator.dtypes:
        dtype = "fp16"
    reasons: list[str] = []
    for limit in SMOKE_SIZES:
        small = Problem(problem.operator, tuple((d, min(s, limit)) for d, s in problem.shape), dtype)
        reasons = operator.family.violations(genome, small, target)
        if not reasons:
            return small
    raise ValueError(f"smoke: {genome} runs no problem clipped to <= {SMOKE_SIZES[-1]}: {'; '.join(reasons)}")


def smoke_setup(target: Target, objective: str = "call") -> tuple[tuple[WorkerInfo, str], WorkerInfo]:
    """The child's state is its WorkerInfo (what it reports) and the objective its rows name."""
    import torch
    import triton

    versions = {"triton": triton.__version__, "torch": torch.__version__.split("+")[0], "cuda": "none",
                "mode": "smoke"}
    info = WorkerInfo(f"smoke:pid{os.getpid()}", SMOKE_GPU, versions, target)
    return (info, objective), info


def smoke_evaluate(state: tuple[WorkerInfo, str], cand: Candidate) -> Evaluation:
    info, objective = state
    op = cand.operator
    resources = dict(cand.compiled.resources) if cand.compiled else {}
    common = {"gpu": SMOKE_GPU, "versions": info.versions, "worker": info.name, "started_at": time.time(),
              "baseline": "smoke-roofline", "resources": resources, "objective": objective}
    phase, module = "compile", None
    try:
        small = smoke_problem(op, cand.genome, cand.problem, info.target)
        resources["smoke_problem"] = small.key
        module = load_source(op.render(cand.genome, small, info.target))
        launcher = getattr(module, op.entry)
        phase = "run"
        checked = run_check(launcher, op, small, cand.seed or 0, device="cpu")
    except Exception as exc:
        fault = classify(exc, phase=phase)
        return cand.row(fault.status, f"smoke: {fault.reason}", **common)
    finally:
        if module is not None:
            sys.modules.pop(module.__name__, None)
    if checked.status != "ok":
        return cand.row(checked.status, f"smoke: {checked.reason}", max_rel_error=checked.max_rel_error, **common)
    cost, floor = float(op.smoke_cost(cand.genome, cand.problem)), op.smoke_roofline_ms(cand.problem)
    # Nothing here is a timing, so the stand-in serves as every clock: a smoke row has a fitness under either
    # objective. (A real row never borrows one clock for another: see Evaluation.fitness_ms.) No host time: the
    # stand-in models none.
    return cand.row("ok", SMOKE_NOTE, median_ms=cost, spread_ms=0.0, times_ms=[], baseline_ms=floor,
                    baseline_spread_ms=0.0, call_ms=cost, baseline_call_ms=floor,
                    max_rel_error=checked.max_rel_error, **common)


class SmokeWorker(ChildWorker):
    """The CPU stand-in for a GpuWorker (same supervision, same rows), for runs without a GPU."""

    note = "smoke: "

    def __init__(self, *, seed: int = 0, start_timeout_s: float = 300.0, objective: str = "call") -> None:
        super().__init__(smoke_setup, smoke_evaluate, setup_args=(INTERPRETED_HOPPER, objective),
                         env={"TRITON_INTERPRET": "1"},
                         name="evo-smoke", seed=[seed, 0x5A0CE], start_timeout_s=start_timeout_s)


class SmokeBackend(GpuBackend):
    """CPU smoke runs: compiles for Hopper on CPUs like a real run, then checks in the CPU interpreter with a
    fitness that is a model estimate, NOT a timing (evo.evaluate.smoke)."""

    needs_gpu = False

    def open_worker(self, device_index: int) -> Worker:
        worker = SmokeWorker(seed=self.seed, objective=self.evaluation.objective)
        worker.info  # noqa: B018 - starts the child now, not on the first candidate
        return worker
