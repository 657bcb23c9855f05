"""A tiny operator for testing the user surface (config, export, report) apart from the real operators.

y = 2 * x + 1 over a vector of N elements. Tests register it with `register_toy(monkeypatch)`; it is never
part of the operator registry outside tests. Throughputs made with it in tests are test data, not timings.
"""

from __future__ import annotations

from typing import Any

from evo.problem import Problem, Target
from genomes.base import Descriptor, Genome, GenomeFamily, InvalidGenome
from genomes.genes import IntChoice, PowerOfTwo
from operators.base import Baseline, Operator


class ToyFamily(GenomeFamily):
    name = "toy"

    def _genes(self):
        return [PowerOfTwo("BLOCK", 16, 1024, group="tile"), IntChoice("num_warps", (1, 2, 4, 8), group="launch")]

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        return ["BLOCK below 2 * num_warps * 8"] if genome["BLOCK"] < genome["num_warps"] * 16 else []

    def repair(self, genome, problem, target, rng):
        g = genome.as_dict()
        while g["BLOCK"] < g["num_warps"] * 16:
            smaller = [w for w in self.genes["num_warps"].values if w < g["num_warps"]]
            if not smaller:
                raise InvalidGenome("cannot repair")
            g["num_warps"] = max(smaller)
        return self.make(g)

    def seeds(self, problem, target):
        return [self.make({"BLOCK": 256, "num_warps": 4})] if 256 in self.genes["BLOCK"].values and \
            4 in self.genes["num_warps"].values else []

    def descriptors(self):
        import math

        return {
            "block": Descriptor("block", lambda g, r: math.log2(g["BLOCK"]), tuple(float(x) for x in range(4, 11))),
            "num_warps": Descriptor("num_warps", lambda g, r: g["num_warps"], (1.0, 2.0, 4.0, 8.0)),
            "smem_kib": Descriptor("smem_kib", lambda g, r: r["shared"] / 1024, (0.0, 32.0), needs_resources=True),
        }


_TEMPLATE = '''"""y = 2 * x + 1 (evo test operator)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _toy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2 + 1, mask=mask)


def toy(x):
    y = torch.empty_like(x)
    n = x.numel()
    _toy_kernel[(triton.cdiv(n, {BLOCK}),)](x, y, n, BLOCK={BLOCK}, num_warps={num_warps})
    return y
'''

_SELFCHECK = '''import torch


def selfcheck_inputs(device):
    g = torch.Generator(device="cpu").manual_seed(1234)
    return (torch.randn({N}, generator=g, dtype=torch.float32).to(device=device, dtype=torch.{torch_dtype}),)


def selfcheck_reference(x):
    return x.float() * 2 + 1


def selfcheck_baseline(x):
    return x * 2 + 1


SELFCHECK_TOLERANCE = {tol}


def problem_sizes(x):
    return (x.numel(),)
'''


class TwoXPlusOne:
    """The judging half of a test operator computing y = 2x + 1 over a vector of N elements."""

    def make_inputs(self, problem, seed, device="cuda"):
        import torch

        g = torch.Generator(device="cpu").manual_seed(seed)
        dt = {"fp16": torch.float16, "fp32": torch.float32}[problem.dtype]
        return (torch.randn(problem.dims["N"], generator=g).to(device=device, dtype=dt),)

    def reference(self, x):
        return x.float() * 2 + 1

    def tolerance(self, problem):
        return 1e-2 if problem.dtype == "fp16" else 1e-5

    def baselines(self):
        return [Baseline("torch", lambda problem: (lambda x: x * 2 + 1))]

    def flops(self, problem):
        return 2 * problem.dims["N"]

    def bytes(self, problem):
        return 2 * problem.dims["N"] * (2 if problem.dtype == "fp16" else 4)


class ToyOperator(TwoXPlusOne, Operator):
    name = "toy"
    dims = ("N",)
    dtypes = ("fp16", "fp32")
    entry = "toy"
    throughput_unit = "GB/s"

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return ToyFamily(overrides)

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        return _TEMPLATE.replace("{BLOCK}", str(genome["BLOCK"])).replace("{num_warps}", str(genome["num_warps"]))


    def selfcheck_source(self, problem: Problem) -> str:
        torch_dtype = {"fp16": "float16", "fp32": "float32"}[problem.dtype]
        return (_SELFCHECK.replace("{N}", str(problem.dims["N"])).replace("{torch_dtype}", torch_dtype)
                .replace("{tol}", repr(self.tolerance(problem))))


def register_toy(monkeypatch) -> None:
    """Make `operators.get("toy")` return a ToyOperator for the duration of one test."""
    import operators

    monkeypatch.setitem(operators._REGISTRY, "toy", "tests.evo.toy_operator:ToyOperator")
