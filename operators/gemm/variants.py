"""GEMM with a fused epilogue: `gemm+bias+gelu`, `gemm+swiglu`, `gemm+geglu`, `gemm+residual`, ...
(operators/gemm/epilogue.py).

The GEMM operator's genome, rendering and launcher, with the epilogue applied to the fp32 tile before it is
stored, so the output is written once instead of being re-read by one elementwise kernel per part. The entry
function takes the epilogue's operands after A and B: `matmul(a, b, bias, residual, scale, out=None)` (those
the epilogue uses). SwiGLU and GeGLU read B[K, 2N] (the gate's N columns, then the up projection's) and write
C[M, N]; their problem's N is the output's width.

What it is timed against is what a PyTorch user writes: cuBLAS (nn.Linear's addmm for a bias) followed by
one eager kernel per part; `evo bench` adds torch.compile max-autotune of the same function, which fuses the
parts into its own GEMM templates or into one elementwise kernel after cuBLAS.
"""

from __future__ import annotations

from typing import Any

from evo.problem import Problem
from genomes.base import GenomeFamily
from genomes.gemm import ELEM_BYTES, GemmFamily
from operators.base import Baseline
from operators.gemm.epilogue import Epilogue
from operators.gemm.operator import GemmOperator, _torch_dtype

__all__ = ["GemmEpilogueOperator", "TOLERANCE", "gemm_variant"]

# The GEMM's tolerances (operators/gemm/operator.py) with room for the epilogue's own rounding: the output is still
# rounded once to the dtype, but a gate (SwiGLU, GeGLU) multiplies two rounded-input products, and a residual adds
# a term of another size, so the relative error grows by up to about sqrt(2).
TOLERANCE = {"fp16": 3e-3, "bf16": 1.5e-2, "fp32": 3e-3}


class GemmEpilogueOperator(GemmOperator):
    def __init__(self, overrides: dict[str, list[Any]] | None = None, epilogue: Epilogue | None = None) -> None:
        if epilogue is None or not epilogue.parts:
            raise ValueError("GemmEpilogueOperator needs an epilogue, e.g. Epilogue.parse(('bias', 'gelu'))")
        self.epilogue = epilogue
        self.name = f"gemm+{epilogue.name}"
        names = ", ".join(f"Tensor {n}" if n != "scale" else "float scale" for n in epilogue.operands)
        self.torch_schema = f"(Tensor a, Tensor b{', ' + names if names else ''}) -> Tensor"
        super().__init__(overrides)

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        ep = self.epilogue
        # measured on an H100 (Triton 3.6, tests/gpu/test_gemm_epilogue_gpu.py): a warp-specialized kernel with a
        # scale, bias, ReLU and residual epilogue was wrong (relative error 0.033) where bias + GELU was right
        refusal = "gave wrong results with an epilogue that reads a residual or a scale (Triton 3.6, sm_90)" \
            if ep.residual or ep.scale else ""
        # a gate reads two B tiles per K step (gate and up), which the Gluon kernel does not
        gluon = "does not read two B tiles per K step (GeGLU)" if ep.geglu else ""
        return GemmFamily(overrides, b_tiles=2 if ep.gate else 1, reads_tile=ep.residual, ws_refusal=refusal,
                          gluon_refusal=gluon)

    # -- inputs and the reference -----------------------------------------------------------------------
    def _b_cols(self, problem: Problem) -> int:
        return 2 * problem.dims["N"] if self.epilogue.gate else problem.dims["N"]

    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """Standard-normal A[M, K], B[K, N] (B[K, 2N] for SwiGLU and GeGLU), bias[N] and residual[M, N], then the scale
        (drawn in [0.25, 2) from `seed`); only the operands the epilogue uses."""
        import torch

        d = problem.dims
        dtype = _torch_dtype(problem.dtype)
        shapes = {"a": (d["M"], d["K"]), "b": (d["K"], self._b_cols(problem)), "bias": (d["N"],),
                  "residual": (d["M"], d["N"])}
        names = ["a", "b", *(n for n in self.epilogue.operands if n != "scale")]
        if torch.device(device).type == "meta":
            tensors = [torch.empty(shapes[n], device=device, dtype=dtype) for n in names]
            scale = [1.0] if self.epilogue.scale else []
            return (*tensors, *scale)
        gen = torch.Generator(device=device).manual_seed(int(seed))
        tensors = [torch.randn(shapes[n], generator=gen, device=device, dtype=torch.float32).to(dtype) for n in names]
        scale = [0.25 + 1.75 * float(torch.rand((), generator=gen, device=device))] if self.epilogue.scale else []
        return (*tensors, *scale)

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        shapes = [(d["M"], d["K"]), (d["K"], self._b_cols(problem))]
        shapes += [(d["N"],)] if self.epilogue.bias else []
        shapes += [(d["M"], d["N"])] if self.epilogue.residual else []
        return shapes + [(d["M"], d["N"])]

    def empty_output(self, *args: Any) -> Any:
        a, b = args[:2]
        return a.new_empty((a.shape[0], b.shape[1] // 2 if self.epilogue.gate else b.shape[1]))

    def reference(self, *inputs: Any) -> Any:
        return self.epilogue.reference(*inputs)

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    # -- contenders -----------------------------------------------------------------------------------------
    def baselines(self) -> list[Baseline]:
        ep = self.epilogue
        return [Baseline("eager", lambda problem: ep.eager,
                         f"PyTorch eager: cuBLAS{' (addmm)' if ep.bias else ''}, then {ep.text} as torch ops")]

    def bench_baselines(self) -> list[Baseline]:
        return self.baselines() + self.tuner_baselines()[:1]

    def tuner_baselines(self, effort: str = "full", budget_s: int | None = None) -> list[Baseline]:
        ep = self.epilogue
        return [Baseline("torch_compile", lambda problem: _compiled(ep),
                         f"torch.compile(mode='max-autotune-no-cudagraphs') of the eager function ({ep.name})")]

    # -- roofline -----------------------------------------------------------------------------------------
    def flops(self, problem: Problem) -> int:
        d = problem.dims
        return 2 * d["M"] * self._b_cols(problem) * d["K"]

    def bytes(self, problem: Problem) -> int:
        d = problem.dims
        elems = d["M"] * d["K"] + d["K"] * self._b_cols(problem) + d["M"] * d["N"]
        elems += d["N"] if self.epilogue.bias else 0
        elems += d["M"] * d["N"] if self.epilogue.residual else 0
        return elems * ELEM_BYTES[problem.dtype]


def gemm_variant(options: tuple[str, ...], overrides: dict[str, list[Any]] | None = None) -> GemmEpilogueOperator:
    """`gemm+<epilogue parts>` (the evo.operator_variants entry point of "gemm"); ValueError naming a bad part."""
    return GemmEpilogueOperator(overrides, Epilogue.parse(options))


def _compiled(ep: Epilogue) -> Any:
    import torch

    torch._dynamo.reset()  # a fresh cache per problem: every shape compiled statically (see gemm_baselines.py)

    def fused(*args: Any) -> Any:
        return ep.eager(*args)

    return torch.compile(fused, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)
