"""GEMM contenders for `evo bench`: what a user would pick instead of an evo kernel.

Besides cuBLAS (GemmOperator's primary baseline), three tuned alternatives, each given its own autotuner:

- `triton_tutorial`: the grouped-pointer kernel of Triton's matmul tutorial, written here, autotuned over
  the tutorial's 16 CUDA configurations (genomes.gemm.TUTORIAL_CONFIGS) keyed on M, N, K.
- `torch_compile`: `torch.compile(mode="max-autotune-no-cudagraphs")` of a matmul. Inductor chooses between
  cuBLAS and its own Triton templates per shape; CUDA graphs are left out so that every contender is timed
  as a plain launch (the L2 flush between runs stays meaningful).
- `helion`: a Helion matmul (operators/gemm/helion_baseline.py) autotuned at effort "quick" (bounded: LFBO pattern
  search, 30 initial configs, 2 copies, at most 5 generations).

Every contender takes the operator's inputs (A[M, K], B[K, N]) and returns C[M, N]. Setting up happens on
the first call (autotuning), which the benchmark times apart as the contender's set-up cost. A contender
that cannot run here raises `ContenderUnavailable` (or any error) and is recorded as skipped, with why.

Helion on the GPU machine: `helion==1.0.0` is pure Python; of its requirements (filecheck, numpy, psutil,
rich, scikit-learn>=1.3, typing-extensions>=4) the GPU image lacks only `filecheck` (no requirements of its
own). Carry them with:  bash ../shared/gpu/prepare-wheels.sh helion==1.0.0 filecheck==1.0.6
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

from evo.problem import Problem
from genomes.gemm import TUTORIAL_CONFIGS
from operators.base import Baseline

__all__ = ["ContenderUnavailable", "gemm_contenders", "tutorial_matmul", "tutorial_autotuned",
           "tutorial_matmul_kernel", "HELION_EFFORT"]

HELION_EFFORT = "quick"  # Helion's bounded preset; "full" takes tens of minutes per shape


class ContenderUnavailable(RuntimeError):
    """A contender that cannot run in this environment (missing package, no GPU, ...)."""


@triton.jit
def tutorial_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                           stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    # Grouped ordering: GROUP_M rows of tiles are walked column by column so that consecutive programs
    # share tiles of A and B in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * tiles_n
    first_m = (pid // in_group) * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % rows
    pid_n = (pid % in_group) // rows

    # Rows and columns past the edge wrap around (as in the tutorial): their loads stay in bounds and
    # their results are masked off at the store, so only the K tail needs a load mask.
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # range over K itself rather than tl.cdiv(K, BLOCK_K): the interpreter of triton 3.6 with numpy >= 2.4
    # fails on the latter
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k0, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + cm[:, None] * stride_cm + cn[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


def _check_operands(a: Any, b: Any) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs A[M, K] and B[K, N], got {tuple(a.shape)} and {tuple(b.shape)}")


def tutorial_matmul(a: Any, b: Any, *, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, GROUP_M: int,
                    num_warps: int = 4, num_stages: int = 3) -> Any:
    """C = A @ B with the tutorial kernel at one fixed configuration."""
    import torch

    _check_operands(a, b)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    tutorial_matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                 GROUP_M=GROUP_M, num_warps=num_warps, num_stages=num_stages)
    return c


def tutorial_configs() -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": gm},
                          num_stages=stages, num_warps=warps)
            for bm, bn, bk, gm, stages, warps in TUTORIAL_CONFIGS]


def tutorial_autotuned(configs: list[triton.Config] | None = None,
                       do_bench: Callable[..., Any] | None = None) -> Callable[[Any, Any], Any]:
    """The tutorial kernel behind `@triton.autotune` (keyed on M, N, K), as a function C = f(A, B).

    `configs` defaults to the tutorial's 16; `do_bench` replaces Triton's timer (tests in the interpreter,
    where there are no CUDA events, pass a stand-in)."""
    import torch

    tuned = triton.autotune(configs=configs or tutorial_configs(), key=["M", "N", "K"],
                            do_bench=do_bench)(tutorial_matmul_kernel)

    def matmul(a: Any, b: Any) -> Any:
        _check_operands(a, b)
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), dtype=a.dtype, device=a.device)
        grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
        tuned[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
        return c

    matmul.autotuner = tuned  # type: ignore[attr-defined]  # lets callers read `best_config`
    return matmul


# -- contenders -----------------------------------------------------------------------------------------
def _make_tutorial(problem: Problem) -> Callable[[Any, Any], Any]:
    return tutorial_autotuned()


def _make_torch_compile(problem: Problem) -> Callable[[Any, Any], Any]:
    import torch

    # Dynamo caches compiled code per code object and falls back to eager after a few recompiles; a fresh
    # cache per problem keeps every shape compiled (the benchmark handles one problem at a time).
    torch._dynamo.reset()

    def matmul(a: Any, b: Any) -> Any:
        return torch.matmul(a, b)

    return torch.compile(matmul, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)


def _make_helion(problem: Problem, effort: str = HELION_EFFORT, budget_s: int | None = None
                 ) -> Callable[[Any, Any], Any]:
    try:
        from operators.gemm.helion_baseline import make_helion_matmul
    except ImportError as e:  # helion itself, or one of its requirements
        raise ContenderUnavailable(f"helion is not importable: {e}") from None
    try:
        return make_helion_matmul(effort=effort, budget_s=budget_s)
    except ValueError as e:  # this helion lacks the asked-for budget
        raise ContenderUnavailable(str(e)) from None


def gemm_tuners(effort: str = "full", budget_s: int | None = None) -> list[Baseline]:
    """The autotuners `evo bench-search` compares searches with: torch.compile max-autotune, and Helion at
    `effort`, its autotuner stopped after `budget_s` seconds (best kernel so far) when given."""
    cut = f", stopped after {budget_s} s with its best so far" if budget_s is not None else ""
    return [Baseline("torch_compile", _make_torch_compile,
                     "torch.compile(mode='max-autotune-no-cudagraphs') of torch.matmul (cuBLAS or Inductor Triton)"),
            Baseline(f"helion_{effort}", lambda problem: _make_helion(problem, effort, budget_s),
                     f"Helion matmul, autotuned with autotune_effort={effort!r}{cut}")]


def gemm_contenders() -> list[Baseline]:
    """The GEMM contenders beside cuBLAS, in the order they are reported."""
    return [
        Baseline("triton_tutorial", _make_tutorial,
                 "Triton tutorial kernel (grouped pointers) autotuned over its 16 CUDA configurations"),
        Baseline("torch_compile", _make_torch_compile,
                 "torch.compile(mode='max-autotune-no-cudagraphs') of torch.matmul (cuBLAS or Inductor Triton)"),
        Baseline("helion", _make_helion, f"Helion matmul, autotuned with autotune_effort={HELION_EFFORT!r}"),
    ]
