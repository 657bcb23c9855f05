"""Test-only pieces for the search tests: a tiny operator and a backend with a STAND-IN fitness.

The operator computes y = 2 * x + 1 with a Triton kernel whose genome has four genes in two groups. The
backend checks each rendered kernel for real, in the Triton interpreter on CPU tensors, and then gives it a
made-up time computed from its genes (`stand_in_ms`): a TEST STAND-IN, not a measurement, which exists only
in this file so that the search has something to climb. Rows it writes say so in `gpu` and `worker`.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import numpy as np

from evo.backend import Backend, Job, Ready, Worker, WorkerInfo, job_evaluation
from evo.problem import HOPPER, Problem, Target
from evo.record import Evaluation
from genomes.base import Descriptor, Genome, GenomeFamily, InvalidGenome
from genomes.genes import Boolean, IntChoice, PowerOfTwo
from operators.base import Operator
from tests.evo.toy_operator import TwoXPlusOne

OPERATOR = "evo_test_axpy"
STAND_IN_GPU = "TEST STAND-IN (not a GPU, not a timing)"


class AxpyFamily(GenomeFamily):
    name = OPERATOR

    def _genes(self):
        return [PowerOfTwo("BLOCK", 16, 256, group="tile"), IntChoice("ITEMS", (1, 2, 4), group="tile"),
                IntChoice("num_warps", (1, 2, 4, 8), group="launch"), Boolean("mask_tail", group="launch")]

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        out = []
        if genome["BLOCK"] * genome["ITEMS"] > max(16, problem.dims["N"]):
            out.append("a program covers more than the whole vector")
        if genome["BLOCK"] < 16 * genome["num_warps"]:
            out.append("BLOCK below 16 elements per warp")
        if not genome["mask_tail"] and problem.dims["N"] % (genome["BLOCK"] * genome["ITEMS"]):
            out.append("unmasked tail needs N divisible by BLOCK * ITEMS")
        return out

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        g = genome.as_dict()
        n = max(16, problem.dims["N"])
        while g["BLOCK"] * g["ITEMS"] > n:
            smaller = [v for v in self.genes["ITEMS"].values if v < g["ITEMS"]]
            if smaller:
                g["ITEMS"] = max(smaller)
                continue
            smaller = [v for v in self.genes["BLOCK"].values if v < g["BLOCK"]]
            if not smaller:
                break
            g["BLOCK"] = max(smaller)
        while g["BLOCK"] < 16 * g["num_warps"]:
            smaller = [v for v in self.genes["num_warps"].values if v < g["num_warps"]]
            if not smaller:
                break
            g["num_warps"] = max(smaller)
        if not g["mask_tail"] and problem.dims["N"] % (g["BLOCK"] * g["ITEMS"]) and True in \
                self.genes["mask_tail"].values:
            g["mask_tail"] = True
        repaired = self.make(g)
        reasons = self.violations(repaired, problem, target)
        if reasons:
            raise InvalidGenome("; ".join(reasons))
        return repaired

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        rng = np.random.default_rng(0)
        try:
            return [self.repair(self.make({"BLOCK": 64, "ITEMS": 1, "num_warps": 2, "mask_tail": True}),
                                problem, target, rng)]
        except InvalidGenome:
            return []

    def descriptors(self) -> dict[str, Descriptor]:
        return {
            "block": Descriptor("block", lambda g, r: math.log2(g["BLOCK"]), (4.0, 5.0, 6.0, 7.0, 8.0)),
            "num_warps": Descriptor("num_warps", lambda g, r: g["num_warps"], (1.0, 2.0, 4.0, 8.0)),
            "items": Descriptor("items", lambda g, r: g["ITEMS"], (1.0, 2.0, 4.0)),
        }


_TEMPLATE = '''"""y = 2 * x + 1 (evo search-test operator)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, ITEMS: tl.constexpr):
    start = tl.program_id(0) * BLOCK * ITEMS
    for i in range(ITEMS):
        offs = start + i * BLOCK + tl.arange(0, BLOCK)
        MASK
        x = tl.load(x_ptr + offs, LOADMASK)
        tl.store(y_ptr + offs, x * 2 + 1, STOREMASK)


def axpy(x):
    y = torch.empty_like(x)
    n = x.numel()
    _axpy_kernel[(triton.cdiv(n, BLOCK_V * ITEMS_V),)](x, y, n, BLOCK=BLOCK_V, ITEMS=ITEMS_V, num_warps=WARPS_V)
    return y
'''


class AxpyOperator(TwoXPlusOne, Operator):
    name = OPERATOR
    dims = ("N",)
    dtypes = ("fp16", "fp32")
    entry = "axpy"
    throughput_unit = "GB/s"

    def make_family(self, overrides):
        return AxpyFamily(overrides)

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        masked = genome["mask_tail"]
        return (_TEMPLATE.replace("BLOCK_V", str(genome["BLOCK"])).replace("ITEMS_V", str(genome["ITEMS"]))
                .replace("WARPS_V", str(genome["num_warps"]))
                .replace("MASK\n", "mask = offs < n\n" if masked else "\n")
                .replace("LOADMASK", "mask=mask" if masked else "")
                .replace("STOREMASK", "mask=mask" if masked else ""))



def register(monkeypatch) -> None:
    """Make `operators.get(OPERATOR)` work for one test (and in a driver subprocess, see `register_now`)."""
    import operators

    monkeypatch.setitem(operators._REGISTRY, OPERATOR, "tests.evo.search_fixtures:AxpyOperator")


def register_now() -> None:
    import operators

    operators._REGISTRY[OPERATOR] = "tests.evo.search_fixtures:AxpyOperator"


def stand_in_ms(genome: Genome) -> float:
    """TEST STAND-IN for a kernel time: smallest at BLOCK=128, ITEMS=2, num_warps=4, masked tail off."""
    return (1.0 + 0.2 * abs(math.log2(genome["BLOCK"]) - 7) + 0.1 * abs(genome["ITEMS"] - 2)
            + 0.05 * abs(math.log2(genome["num_warps"]) - 2) + 0.02 * genome["mask_tail"])


def stand_in_fails(genome: Genome) -> bool:
    """A stand-in compile failure, so that failures flow through the search: BLOCK=256 with one warp."""
    return genome["BLOCK"] == 256 and genome["num_warps"] == 1


class StandInBackend(Backend):
    """Render for real, compile = a stand-in failure for some genomes, evaluate = a real interpreter check,
    then the stand-in time. `delay_s` makes each evaluation take a while (for the kill-and-resume test)."""

    needs_gpu = False

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s

    def render(self, job: Job, target: Target) -> Ready | Evaluation:
        from evo.modules import source_hash

        source = AxpyOperator().render(job.genome, job.problem, target)
        return Ready(job, source_hash(source), source)

    def compile(self, ready: Ready, target: Target) -> Ready | Evaluation:
        if stand_in_fails(ready.job.genome):
            return job_evaluation(ready.job, "compile_error", "stand-in compile failure", ready.source_hash)
        return ready

    def open_worker(self, device_index: int) -> Worker:
        return StandInWorker(self.delay_s)


class StandInWorker(Worker):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self._info = WorkerInfo(f"stand-in@{os.getpid()}", STAND_IN_GPU, {"test": "1"}, HOPPER)

    @property
    def info(self) -> WorkerInfo:
        return self._info

    def evaluate(self, ready: Ready, timeout_s: float) -> Evaluation:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the module's @triton.jit runs
        from evo.modules import load_source

        job = ready.job
        started = time.time()
        op = AxpyOperator()
        (x,) = op.make_inputs(job.problem, seed=1, device="cpu")
        y = getattr(load_source(ready.payload), op.entry)(x)
        err = float((y.float() - op.reference(x)).norm() / op.reference(x).norm())
        if self.delay_s:
            time.sleep(self.delay_s)
        common = dict(source_hash=ready.source_hash, gpu=self._info.gpu, versions=dict(self._info.versions),
                      worker=self._info.name, max_rel_error=err, started_at=started, finished_at=time.time())
        if not err <= op.tolerance(job.problem):
            return job_evaluation(job, "wrong", f"relative error {err:.2e}", **common)
        ms = stand_in_ms(job.genome)
        return job_evaluation(job, "ok", "", median_ms=ms, spread_ms=0.0, times_ms=[ms], baseline="torch",
                              baseline_ms=1.5, **common)


def experiment(name: str = "t", sizes: tuple[int, ...] = (512, 256), evaluations: int | None = 20, seed: int = 0,
               kind: str = "local", **kw: Any):
    """A small experiment over this file's operator (register it first)."""
    from evo.experiment import Budget, ExecutorSpec, Experiment

    budget = kw.pop("budget", None) or Budget(evaluations=evaluations)
    problems = tuple(Problem.make(OPERATOR, ("N",), (n,), "fp32") for n in sizes)
    kw.setdefault("initial_random", 4)
    return Experiment(name=name, operator=OPERATOR, problems=problems, budget=budget, seed=seed,
                      executor=ExecutorSpec(kind=kind), source=f"name: {name}\n# search test\n", **kw)
