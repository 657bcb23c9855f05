"""The GEMM operator: C[M, N] = A[M, K] @ B[K, N] for row-major fp16, bf16 and fp32 operands.

Code generation lives in operators/gemm/source.py (Triton: kernel.py and plan.py pasted under a header) and
gluon_source.py; this module binds it to the operator interface with the reference (fp32 torch), seeded inputs, the
tolerance per dtype, the cuBLAS baseline and the exported module's self-check (selfcheck.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.gemm import ELEM_BYTES, GemmFamily
from operators._paste import pasted_source
from operators.base import Baseline, Operator
from operators.gemm.gluon_source import gluon_source
from operators.gemm.source import ENTRY_NAME, gemm_source

__all__ = ["GemmOperator"]

SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")

# Largest accepted ||C - ref||_F / ||ref||_F. Inputs are exact in their dtype and the reference is the fp32
# product of those same values, so the expected error is the rounding of C plus the dot's input rounding:
# - fp16: C rounded to 11 significant bits, RMS relative error ~2**-11 / sqrt(3) ~ 3e-4: 2e-3 is ~7x that.
# - bf16: C rounded to 8 significant bits, ~2**-8 / sqrt(3) ~ 2.3e-3: 1e-2 is ~4x that.
# - fp32: the GPU's tl.dot rounds operands to tf32 (11 bits), ~sqrt(2/3) * 2**-11 ~ 4e-4: 2e-3 is ~5x that.
# A kernel that drops or repeats one K step of k_tiles errs by ~1/sqrt(k_tiles) (>= 6% up to 256 steps);
# unwritten outputs are caught by the evaluator's NaN poisoning rather than by this norm.
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2, "fp32": 2e-3}


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, DTYPES[name])


class GemmOperator(Operator):
    name = "gemm"
    dims = ("M", "N", "K")
    example = (4096, 4096, 4096)
    dtypes = ("fp16", "bf16", "fp32")
    entry = ENTRY_NAME
    throughput_unit = "TFLOP/s"
    torch_schema = "(Tensor a, Tensor b) -> Tensor"
    epilogue: Any = None  # a fused epilogue (operators/gemm/epilogue.py): set by GemmEpilogueOperator only

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return GemmFamily(overrides)

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        """Source of a standalone module for `genome`; raises InvalidGenome if it cannot run `problem`."""
        self.family.require(genome, problem, target, "gemm")
        # the GPU is named by its architecture only, so H100 and H200 share one source (and compile cache)
        title = (f"GEMM kernel rendered by evo from genome {genome.hash} for {problem.key} on sm_{target.arch}.\n\n"
                 + textwrap.fill(f"Genome: {genome}", 100))
        if genome["backend"] == "gluon":
            return gluon_source(genome.as_dict(), title, epilogue=self.epilogue)
        return gemm_source(genome.as_dict(), title, *self._row_alignment(genome, problem), epilogue=self.epilogue)

    @staticmethod
    def _row_alignment(genome: Genome, problem: Problem) -> tuple[int, tuple[str, ...]]:
        """(elements per 16 bytes, row strides among K and N that are multiples of it but not of 16) for pointer
        kernels: Triton specialises integer arguments on divisibility by 16 only, so e.g. N=3000 in bf16 would
        otherwise load B element by element."""
        vector = 16 // ELEM_BYTES[problem.dtype]
        if genome["memory"] != "pointer":
            return 1, ()  # tensor descriptors take their strides at run time
        dims = tuple(d for d in ("K", "N") if problem.dims[d] % 16 and problem.dims[d] % vector == 0)
        return (vector, dims) if dims else (1, ())

    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """Standard-normal A[M, K] and B[K, N] in the problem's dtype, drawn on `device` from `seed`
        (uninitialised tensors on the "meta" device, which has no data)."""
        import torch

        d = problem.dims
        dtype = _torch_dtype(problem.dtype)
        if torch.device(device).type == "meta":  # shapes and dtypes only, for compiling ahead of time
            return (torch.empty((d["M"], d["K"]), device=device, dtype=dtype),
                    torch.empty((d["K"], d["N"]), device=device, dtype=dtype))
        gen = torch.Generator(device=device).manual_seed(int(seed))
        a = torch.randn((d["M"], d["K"]), generator=gen, device=device, dtype=torch.float32).to(dtype)
        b = torch.randn((d["K"], d["N"]), generator=gen, device=device, dtype=torch.float32).to(dtype)
        return a, b

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        return [(d["M"], d["K"]), (d["K"], d["N"]), (d["M"], d["N"])]  # A, B, C

    def empty_output(self, *args: Any) -> Any:
        a, b = args
        return a.new_empty((a.shape[0], b.shape[1]))

    def reference(self, *inputs: Any) -> Any:
        import torch

        a, b = inputs
        # PyTorch keeps fp32 matmuls in full fp32 unless a caller enables tf32
        return torch.matmul(a.float(), b.float())

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        import torch

        return [Baseline("cublas", lambda problem: torch.matmul, "torch.matmul (cuBLAS on CUDA)")]

    def bench_baselines(self) -> list[Baseline]:
        """cuBLAS first, then the contenders `evo bench` sets up once per problem (see gemm_baselines.py)."""
        from operators.gemm.baselines import gemm_contenders

        return self.baselines() + gemm_contenders()

    def tuner_baselines(self, effort: str = "full", budget_s: int | None = None) -> list[Baseline]:
        """torch.compile max-autotune and Helion at `effort`, cut at `budget_s` (see gemm_baselines.py)."""
        from operators.gemm.baselines import gemm_tuners

        return gemm_tuners(effort, budget_s)

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels: the problem's constants above operators/gemm/selfcheck.py
        pasted verbatim (the epilogue's parts name its steps)."""
        d = problem.dims
        parts = self.epilogue.parts if self.epilogue else ()
        head = ["import torch", "",
                f"SELFCHECK_SIZES = ({d['M']}, {d['N']}, {d['K']})  # (M, N, K), N the output's width",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_PARTS = {parts!r}",
                f"SELFCHECK_TOLERANCE = {float(self.tolerance(problem))!r}  # largest accepted ||C - ref|| / ||ref||",
                "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)

    def flops(self, problem: Problem) -> int:
        d = problem.dims
        return 2 * d["M"] * d["N"] * d["K"]

    def bytes(self, problem: Problem) -> int:
        d = problem.dims
        return (d["M"] * d["K"] + d["K"] * d["N"] + d["M"] * d["N"]) * ELEM_BYTES[problem.dtype]
