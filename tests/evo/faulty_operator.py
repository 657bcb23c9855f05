"""A test operator whose genome can ask for a broken kernel: out = 2 * x + y over N elements.

The `fault` gene picks what goes wrong, one kind of fault per value, so the evaluator's fault handling is
tested through the same path as real candidates (render -> compile -> check -> time). Used by the CPU
tests (stand-ins, interpreter) and by tests/gpu/test_faults.py on a real GPU. Never registered outside tests:
workers receive an instance through their `operators` argument. Any timing made with it is test data.
"""

from __future__ import annotations

from typing import Any

from evo.problem import Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.genes import Categorical, IntChoice, PowerOfTwo
from operators.base import Baseline, Operator

FAULTS = ("none", "syntax", "compile", "smem", "oob", "hang", "wrong", "nan", "unwritten", "raise",
          "launcher_exit", "launcher_sleep")


class FaultyFamily(GenomeFamily):
    name = "faulty"

    def _genes(self):
        return [PowerOfTwo("BLOCK", 32, 1024, group="tile"), IntChoice("num_warps", (1, 2, 4, 8), group="launch"),
                Categorical("fault", FAULTS, group="fault")]

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        return []

    def repair(self, genome, problem, target, rng):
        return genome


_HEAD = '''"""out = 2 * x + y, fault: {fault} (evo test operator)."""
import os
import time

import torch
import triton
import triton.language as tl


@triton.jit
def faulty_kernel(x_ptr, y_ptr, out_ptr, n, flag, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    val = 2 * x + y
'''

_BODY = {
    "none": "    tl.store(out_ptr + offs, val, mask=mask)\n",
    "syntax": "    tl.store(out_ptr + offs, val, mask=mask\n",  # Python cannot even import the module
    "compile": "    tl.store(out_ptr + offs, tl.no_such_function(val), mask=mask)\n",
    # a loop of 128x128 fp16 tile products pipelined 8 deep (the launcher asks num_stages=8): 8 stages of
    # two 32 KiB operand tiles need 512 KiB of shared memory, more than twice what a Hopper block may have
    "smem": ("    r = tl.arange(0, 128)\n"
             "    acc = tl.zeros((128, 128), dtype=tl.float32)\n"
             "    for k in range(0, n, 128):\n"
             "        a = tl.load(x_ptr + (r[:, None] * 128 + r[None, :] + k) % n)\n"
             "        b = tl.load(y_ptr + (r[:, None] * 128 + r[None, :] + k) % n)\n"
             "        acc += tl.dot(a, b)\n"
             "    tl.store(out_ptr + r, tl.sum(acc, axis=1).to(out_ptr.dtype.element_ty), mask=(r < 0) & (flag > 0))\n"
             "    tl.store(out_ptr + offs, val, mask=mask)\n"),
    # far outside any allocation: an illegal address on a GPU
    "oob": "    tl.store(out_ptr + offs.to(tl.int64) + (1 << 40), val, mask=mask)\n",
    # never ends (inputs hold no NaN), and has a side effect so the loop cannot be removed
    "hang": ("    k = 0\n"
             "    while tl.load(y_ptr) == tl.load(y_ptr):\n"
             "        k += 1\n"
             "        tl.store(out_ptr + offs, val + k, mask=mask)\n"),
    "wrong": "    tl.store(out_ptr + offs, val + 1, mask=mask)\n",
    "nan": "    tl.store(out_ptr + offs, tl.where(offs % 7 == 3, float('nan'), val), mask=mask)\n",
    "unwritten": "    tl.store(out_ptr + offs, val, mask=mask & (offs % 2 == 0))\n",
}

_LAUNCHER = '''

def faulty(x, y, out=None):
{pre}    out = torch.empty_like(x) if out is None else out
    n = x.numel()
    faulty_kernel[(triton.cdiv(n, {BLOCK}),)](x, y, out, n, 0, BLOCK={BLOCK}, num_warps={num_warps}{stages})
    return out
'''

_PRE = {
    "raise": "    raise RuntimeError('deliberate failure in the launcher')\n",
    "launcher_exit": "    os._exit(7)\n",
    "launcher_sleep": "    time.sleep(3600)\n",
}


def render_source(genome: Genome) -> str:
    fault = genome["fault"]
    body = _BODY.get(fault, _BODY["none"])
    launcher = (_LAUNCHER.replace("{pre}", _PRE.get(fault, "")).replace("{BLOCK}", str(genome["BLOCK"]))
                .replace("{num_warps}", str(genome["num_warps"]))
                .replace("{stages}", ", num_stages=8" if fault == "smem" else ""))
    return _HEAD.replace("{fault}", fault) + body + launcher


class FaultyOperator(Operator):
    name = "faulty"
    dims = ("N",)
    dtypes = ("fp16", "fp32")
    entry = "faulty"
    throughput_unit = "GB/s"

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return FaultyFamily(overrides)

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        return render_source(genome)

    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        import torch

        n = problem.dims["N"]
        dt = {"fp16": torch.float16, "fp32": torch.float32}[problem.dtype]
        if device == "meta":
            return torch.empty(n, dtype=dt, device="meta"), torch.empty(n, dtype=dt, device="meta")
        g = torch.Generator(device="cpu").manual_seed(seed)
        return tuple(torch.randn(n, generator=g).to(device=device, dtype=dt) for _ in range(2))

    def reference(self, x: Any, y: Any) -> Any:
        return 2 * x.float() + y.float()

    def tolerance(self, problem: Problem) -> float:
        return 1e-3 if problem.dtype == "fp16" else 1e-5

    def baselines(self) -> list[Baseline]:
        return [Baseline("torch", lambda problem: (lambda x, y: torch_axpy(x, y)))]

    def flops(self, problem: Problem) -> int:
        return 2 * problem.dims["N"]

    def bytes(self, problem: Problem) -> int:
        return 3 * problem.dims["N"] * (2 if problem.dtype == "fp16" else 4)


def torch_axpy(x: Any, y: Any) -> Any:
    import torch

    return torch.add(y, x, alpha=2)


def genome(fault: str = "none", block: int = 1024, num_warps: int = 4) -> Genome:
    return FaultyOperator().family.make({"BLOCK": block, "num_warps": num_warps, "fault": fault})


def candidate(fault: str = "none", n: int = 1024, dtype: str = "fp32", block: int = 1024, num_warps: int = 4,
              origin: str = "test"):
    from evo.candidate import make_candidate
    from evo.problem import HOPPER

    op = FaultyOperator()
    return make_candidate(op, genome(fault, block, num_warps), op.problem((n,), dtype), HOPPER, origin=origin)
