"""The plain-torch self-check code `evo export` appends to an exported GEMM kernel (see
`Operator.selfcheck_source` for the names it must define)."""

from __future__ import annotations

from evo.problem import DTYPES, Problem

__all__ = ["gemm_selfcheck_source"]

_TEMPLATE = '''import torch


def selfcheck_inputs(device):
    """Fresh standard-normal A[M, K] and B[K, N] (never zeros: some GPUs run faster on zeros)."""
    gen = torch.Generator(device=device).manual_seed(20240917)
    a = torch.randn(({M}, {K}), generator=gen, device=device, dtype=torch.float32).to(torch.{dtype})
    b = torch.randn(({K}, {N}), generator=gen, device=device, dtype=torch.float32).to(torch.{dtype})
    return a, b


def selfcheck_reference(a, b):
    return torch.matmul(a.float(), b.float())  # fp32 products of the same (rounded) inputs


def selfcheck_baseline(a, b):
    return torch.matmul(a, b)  # cuBLAS on CUDA: what the kernel was timed against


SELFCHECK_TOLERANCE = {tolerance!r}  # largest accepted ||C - ref|| / ||ref||


def problem_sizes(a, b):
    return (a.shape[0], b.shape[1], a.shape[1])
'''


def gemm_selfcheck_source(problem: Problem, tolerance: float) -> str:
    d = problem.dims
    return (_TEMPLATE.replace("{M}", str(d["M"])).replace("{N}", str(d["N"])).replace("{K}", str(d["K"]))
            .replace("{dtype}", DTYPES[problem.dtype]).replace("{tolerance!r}", repr(float(tolerance))))
