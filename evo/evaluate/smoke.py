"""The CPU smoke evaluator, for machines without a GPU: correctness in the Triton interpreter at a tiny
problem size, and a fitness that is plainly NOT a timing.

Each candidate's genome is rendered again for a small version of its problem (every dimension clipped to
64, or 128 or 256 when the genome needs room; bf16 becomes fp16 because bf16 arithmetic is broken in the
interpreter) and checked against the operator's reference exactly as on a GPU (evo.evaluate.check). The fitness is
`Operator.smoke_cost(genome, problem)`, a deterministic model estimate for the real problem, and every row
says so: gpu "cpu-interpreter", baseline "smoke-roofline", reason "smoke: fitness is a model estimate,
not a timing". Runs in a supervised child (with TRITON_INTERPRET=1), so a kernel that loops forever in the
interpreter times out like one on a GPU. Keeps to the Operator and GenomeFamily interfaces.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from evo.evaluate.candidate import Candidate, Prepared
from evo.evaluate.supervisor import ChildDied, ChildRaised, ChildTimeout, Supervised
from evo.problem import HOPPER, Problem, Target
from evo.store.record import Evaluation

__all__ = ["SmokeWorker", "SMOKE_GPU", "SMOKE_NOTE", "smoke_problem", "smoke_setup", "smoke_evaluate"]

SMOKE_GPU = "cpu-interpreter"
SMOKE_NOTE = "smoke: fitness is a model estimate, not a timing"
SMOKE_SIZES = (64, 128, 256)


def smoke_problem(operator: Any, genome: Any, problem: Problem, target: Target) -> Problem:
    """The smallest clipped version of `problem` (dims <= 64, else 128, else 256) that `genome` can run;
    bf16 is replaced by fp16. Raises ValueError when none is valid."""
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


def smoke_setup(settings: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    import torch
    import triton

    versions = {"triton": triton.__version__, "torch": torch.__version__.split("+")[0], "cuda": "none",
                "mode": "smoke"}
    state = {"operators": dict(settings.get("operators") or {}), "target": settings.get("target") or HOPPER,
             "versions": versions, "worker": f"smoke:pid{os.getpid()}"}
    return state, {"gpu": SMOKE_GPU, "versions": versions, "worker": state["worker"]}


def smoke_evaluate(state: dict[str, Any], request: tuple[Prepared, int]) -> Evaluation:
    from evo.evaluate.check import run_check
    from evo.evaluate.faults import classify
    from evo.evaluate.modules import load_source

    prepared, seed = request
    cand = prepared.candidate
    name = cand.problem.operator
    if name not in state["operators"]:
        import operators

        state["operators"][name] = operators.get(name)
    op = state["operators"][name]
    compiled = prepared.compiled
    resources = dict(compiled.resources) if compiled else {}
    common = {"gpu": SMOKE_GPU, "versions": state["versions"], "worker": state["worker"], "started_at": time.time(),
              "baseline": "smoke-roofline", "compile_s": compiled.compile_s if compiled else None}
    phase, module = "compile", None
    try:
        small = smoke_problem(op, cand.genome, cand.problem, state["target"])
        resources["smoke_problem"] = small.key
        module = load_source(op.render(cand.genome, small, state["target"]))
        launcher = getattr(module, op.entry)
        phase = "run"
        checked = run_check(launcher, op, small, seed, device="cpu")
    except Exception as exc:
        fault = classify(exc, phase=phase)
        return cand.evaluation(fault.status, f"smoke: {fault.reason}", resources=resources, finished_at=time.time(),
                               **common)
    finally:
        if module is not None:
            sys.modules.pop(module.__name__, None)
    if checked.status != "ok":
        return cand.evaluation(checked.status, f"smoke: {checked.reason}", max_rel_error=checked.max_rel_error,
                               resources=resources, finished_at=time.time(), **common)
    estimate = float(op.smoke_cost(cand.genome, cand.problem))
    roofline = op.smoke_roofline_ms(cand.problem)
    return cand.evaluation("ok", SMOKE_NOTE, median_ms=estimate, spread_ms=0.0, times_ms=[], baseline_ms=roofline,
                           baseline_spread_ms=0.0, max_rel_error=checked.max_rel_error, resources=resources,
                           finished_at=time.time(), **common)


class SmokeWorker:
    """The CPU stand-in for a GpuWorker (same `evaluate`, `gpu`, `versions`), for runs without a GPU."""

    def __init__(self, *, target: Target = HOPPER, seed: int = 0, operators: dict[str, Any] | None = None,
                 setup: Callable[..., Any] | None = None, start_timeout_s: float = 300.0) -> None:
        settings = {"target": target, "operators": dict(operators or {})}
        self._child = Supervised(setup or smoke_setup, smoke_evaluate, setup_args=(settings,),
                                 env={"TRITON_INTERPRET": "1"}, name="evo-smoke", start_timeout_s=start_timeout_s)
        self._rng = np.random.default_rng([seed, 0x5A0CE])

    @property
    def info(self) -> dict[str, Any]:
        return self._child.info()

    @property
    def gpu(self) -> str:
        return SMOKE_GPU

    @property
    def versions(self) -> dict[str, str]:
        return self.info["versions"]

    @property
    def restarts(self) -> int:
        return max(0, self._child.starts - 1)

    def evaluate(self, item: Prepared | Candidate, timeout_s: float = 60.0) -> Evaluation:
        prepared = item if isinstance(item, Prepared) else Prepared(item)
        cand = prepared.candidate
        info = self.info
        common = {"gpu": SMOKE_GPU, "versions": info["versions"], "worker": info["worker"], "started_at": time.time()}
        try:
            return self._child.call((prepared, int(self._rng.integers(0, 2**31 - 1))), timeout_s)
        except ChildTimeout as exc:
            return cand.evaluation("timeout", f"smoke: {exc}", finished_at=time.time(), **common)
        except ChildDied as exc:
            return cand.evaluation("crashed", f"smoke: {exc}", finished_at=time.time(), **common)
        except ChildRaised as exc:
            from evo.evaluate.faults import classify

            return cand.evaluation(classify(f"{exc.kind}: {exc.message}").status, f"smoke: {exc.message[-1000:]}",
                                   finished_at=time.time(), **common)

    def close(self) -> None:
        self._child.close()

    def __enter__(self) -> SmokeWorker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
