"""`rmsnorm+residual`: the residual add and the RMSNorm that follows it, in one kernel (issue 40's decode fusions).

    h = x + residual                                   (rounded to the dtype, as PyTorch's add is)
    y = h * rsqrt(mean(h^2) + eps) * weight            (the formula of operators/rmsnorm.py)

The entry `add_rmsnorm(x, residual, weight, out=None, eps=1e-6)` returns (y, h): the normed input of the next
part of the layer and the new residual stream (`out=(y, residual)` updates the residual in place). Both are written
once, x and the residual read once, where PyTorch eager writes h, then reads it back for the norm. The rendered
module is a header (the genome's constants and the entry) above operators/add_rmsnorm/kernel.py pasted verbatim.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import DTYPES, Problem, Target
from genomes.add_rmsnorm import AddRMSNormFamily
from genomes.base import Genome, GenomeFamily
from genomes.rowwise import ELEM_BYTES
from operators._paste import pasted_source
from operators.base import Baseline, Operator
from operators.rmsnorm import EPS
from operators.rmsnorm import _eager as _eager_norm
from operators.rowwise import TOLERANCE, fresh_function

__all__ = ["AddRMSNormOperator", "rmsnorm_variant", "KERNEL_FILE", "SELFCHECK_FILE"]

KERNEL_FILE = Path(__file__).with_name("kernel.py")
SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")
_STORE = {"none": ("", ""), "evict_first": ("", "evict_first"), "streaming": (".cs", "")}  # (cache, eviction)

# The generated part of a rendered module: the genome's constants and the entry function (the rest is pasted).
_HEADER = '''"""{title}
"""

import torch
import triton
import triton.language as tl

{runtime}

# the genome's constants, as operators/add_rmsnorm/kernel.py's plan reads them
CONFIG = {config}

_PLANS = PlanCache()  # argument signature -> run(...): checks, grid and the bound kernel, done once


def add_rmsnorm(x, residual, weight, out=None, eps={eps!r}):
    """h = x + residual and y = RMSNorm(h) * weight over the last dimension, in x's dtype; returns (y, h)."""
    key = (signature(x), signature(residual), signature(weight),
           None if out is None else tuple(signature(t) for t in out))
    run = _PLANS.get(key)
    if run is None:
        run = _PLANS.add(key, add_rmsnorm_plan(x, residual, weight, out, CONFIG))
    return run(x, residual, weight, out, eps)


'''


def _formula(x: Any, residual: Any, weight: Any, eps: float = EPS) -> Any:
    """What a PyTorch user writes: the add in the dtype, then RMSNorm in fp32, cast back."""
    import torch

    h = x + residual
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(h.dtype), h


def _eager(problem: Problem) -> Any:
    norm = _eager_norm(problem)  # the rmsnorm operator's own eager baseline: F.rms_norm where torch has it

    def add_rmsnorm(x: Any, residual: Any, weight: Any, eps: float = EPS) -> Any:
        h = x + residual
        return norm(h, weight, eps), h

    return add_rmsnorm


class AddRMSNormOperator(Operator):
    name = "rmsnorm+residual"
    dims = ("rows", "cols")
    example = (16, 4096)
    entry = "add_rmsnorm"
    throughput_unit = "GB/s"
    torch_schema = f"(Tensor x, Tensor residual, Tensor weight, float eps={EPS!r}) -> (Tensor, Tensor)"

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return AddRMSNormFamily(overrides)

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        self.family.require(genome, problem, target, self.name)
        g = genome.as_dict()
        cache, evict = _STORE[g["store"]]
        config = {"ROWS": g["ROWS"], "BLOCK": g["BLOCK"], "SINGLE": g["mode"] == "single",
                  "NUM_WARPS": g["num_warps"], "NUM_STAGES": g["num_stages"],
                  "EVICT_IN": "" if g["evict_in"] == "none" else g["evict_in"],
                  "EVICT_W": "" if g["evict_w"] == "none" else g["evict_w"], "STORE_CACHE": cache, "STORE_EVICT": evict}
        title = (f"evo kernel: {self.name} (residual add, then RMSNorm) rendered from genome {genome.hash} for "
                 f"{problem.key} on sm_{target.arch}.\n\n" + textwrap.fill(f"Genome: {genome}", 100))
        return _HEADER.format(title=title, runtime=runtime_source().rstrip("\n"), config=repr(config), eps=EPS) \
            + pasted_source(KERNEL_FILE)

    # -- as a torch op ----------------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        import torch

        x = args[0]
        return (torch.empty_like(x, memory_format=torch.contiguous_format),
                torch.empty_like(x, memory_format=torch.contiguous_format))

    def call_into(self, entry: Any, *args: Any, out: Any) -> Any:
        x, residual, weight, *eps = args  # eps comes after `out` in the entry function
        return entry(x, residual, weight, out=out, **({"eps": eps[0]} if eps else {}))

    def eager_entry(self, entry: Any) -> Any:
        def add_rmsnorm(x: Any, residual: Any, weight: Any, eps: float = EPS) -> Any:
            return entry(x, residual, weight, eps=eps)

        return add_rmsnorm

    # -- judging a kernel -------------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """Standard-normal x[M, N], residual[M, N] and weight[N] in the problem's dtype, drawn from `seed`."""
        import torch

        m, n = problem.dims["rows"], problem.dims["cols"]
        dtype = getattr(torch, DTYPES[problem.dtype])
        if torch.device(device).type == "meta":
            return (torch.empty(m, n, device=device, dtype=dtype), torch.empty(m, n, device=device, dtype=dtype),
                    torch.empty(n, device=device, dtype=dtype))
        gen = torch.Generator(device=device).manual_seed(int(seed))
        return tuple(torch.randn(shape, generator=gen, device=device, dtype=dtype) for shape in ((m, n), (m, n), (n,)))

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        m, n = problem.dims["rows"], problem.dims["cols"]
        return [(m, n), (m, n), (n,), (m, n), (m, n)]  # x, residual, weight; y, h

    def reference(self, *inputs: Any) -> Any:
        """(y, h) in fp32 from the exact sum (the kernel's h is rounded to the dtype first: within tolerance)."""
        import torch

        x, residual, weight = inputs
        h = x.float() + residual.float()
        return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * weight.float(), h

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        return [
            Baseline("torch_eager", _eager,
                     "x + residual, then torch.nn.functional.rms_norm (the fp32 formula where torch lacks it)"),
            Baseline("torch_compile", _compiled,
                     "torch.compile of x + residual and the fp32 RMSNorm formula, default mode, static shape"),
        ]

    def bench_baselines(self) -> list[Baseline]:
        """The two above, and the fp32 formula in eager PyTorch (what a model's own RMSNorm module computes)."""
        return self.baselines() + [Baseline("torch_formula", lambda problem: _formula,
                                            "x + residual, then the fp32 formula x * rsqrt(mean(x^2) + eps) * w "
                                            "in eager PyTorch (several kernels)")]

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels: the problem's constants above
        operators/add_rmsnorm/selfcheck.py pasted verbatim."""
        d = problem.dims
        head = ["import torch", "", f"SELFCHECK_SIZES = ({d['rows']}, {d['cols']})  # (rows, cols)",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_EPS = {EPS!r}",
                f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}", "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)

    def flops(self, problem: Problem) -> int:
        """~5 per element: the add, square, sum, and two multiplies."""
        return 5 * problem.dims["rows"] * problem.dims["cols"]

    def bytes(self, problem: Problem) -> int:
        """x and the residual read, y and h written, the weight read once."""
        m, n = problem.dims["rows"], problem.dims["cols"]
        return (4 * m * n + n) * ELEM_BYTES[problem.dtype]


def _compiled(problem: Problem) -> Any:
    import torch

    return torch.compile(fresh_function(_formula), dynamic=False)


def rmsnorm_variant(options: tuple[str, ...], overrides: dict[str, list[Any]] | None = None) -> Operator:
    """`rmsnorm+residual` (the evo.operator_variants entry point of "rmsnorm"); ValueError for another option."""
    if tuple(options) != ("residual",):
        raise ValueError(f"rmsnorm takes one option, 'residual' (rmsnorm+residual: the residual add fused before "
                         f"the norm); got {'+'.join(('rmsnorm', *options))!r}")
    return AddRMSNormOperator(overrides)
