"""Row-wise RMSNorm with a weight: y[i, :] = x[i, :] * rsqrt(mean(x[i, :]^2) + eps) * w over a contiguous [M, N] input.

Rendered kernels compute in fp32 and cast the result back to the input dtype. A single-pass kernel reads each
row once and loads the weight once per program; a looped kernel sums squares over BLOCK-wide steps, then
reads the row (and the weight) again to write the output.
"""

from __future__ import annotations

from typing import Any

from evo.problem import Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.rmsnorm import RMSNormFamily
from operators.base import Baseline
from operators.rowwise import RowwiseOperator, Skeleton, fresh_function, load, store
from operators.rowwise_split import SplitMath, render_split

__all__ = ["RMSNormOperator", "EPS"]

EPS = 1e-6


def _formula(x: Any, weight: Any, eps: float = EPS) -> Any:
    """RMSNorm the way users write it: in fp32, cast back."""
    import torch

    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _functional(x: Any, weight: Any, eps: float = EPS) -> Any:
    import torch

    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)


def _eager(problem: Problem) -> Any:
    import torch

    # torch's own operator where this torch has it (2.4+), else the fp32 formula
    return _functional if hasattr(torch.nn.functional, "rms_norm") else _formula


def _compiled(problem: Problem) -> Any:
    import torch

    return torch.compile(fresh_function(_formula), dynamic=False)


class RMSNormOperator(RowwiseOperator):
    name = "rmsnorm"
    entry = "rmsnorm"
    torch_schema = f"(Tensor x, Tensor weight, float eps={EPS!r}) -> Tensor"
    kernel_name = "rmsnorm_kernel"

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return RMSNormFamily(overrides)

    # -- code generation ----------------------------------------------------------------------------
    def _weight(self, sk: Skeleton) -> str:
        return f"w = {load('w_ptr + cols', 'col_mask', None, sk.g['evict_w'])}.to(tl.float32)"

    def _single(self, sk: Skeleton) -> list[str]:
        x = load("x_ptr + offs", "mask", "0.0", sk.g["evict_x"])
        return [
            f"x = {x}",
            "x = x.to(tl.float32)",
            "rstd = tl.rsqrt(tl.sum(x * x, axis=1) / N_COLS + eps)",
            "y = x * rstd[:, None] * w[None, :]",
            store("y_ptr + offs", "y.to(y_ptr.dtype.element_ty)", sk.g["store_y"]),
        ]

    def _looped(self, sk: Skeleton) -> list[str]:
        g = sk.g
        first = load("x_ptr + row_start + cols[None, :]", "mask", "0.0", g["keep_x"])
        second = load("x_ptr + row_start + cols[None, :]", "mask", "0.0", g["evict_x"])
        squares = [f"x = {first}", "x = x.to(tl.float32)", "acc += x * x"]
        write = [f"x = {second}",
                 "x = x.to(tl.float32)",
                 self._weight(sk),
                 "y = x * rstd[:, None] * w[None, :]",
                 store("y_ptr + row_start + cols[None, :]", "y.to(y_ptr.dtype.element_ty)", g["store_y"])]
        return (["acc = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"] + sk.column_loop(squares)
                + ["rstd = tl.rsqrt(tl.sum(acc, axis=1) / N_COLS + eps)"] + sk.column_loop(write))

    def split_math(self, sk: Skeleton) -> SplitMath:
        """Chunk sums of squares q; combined as rsqrt(sum_i q_i / N + eps); the weight is read with the chunk."""
        def running(t: str, per_lane: bool) -> tuple[list[str], list[str], list[str]]:
            if per_lane:
                return (["q_run = tl.zeros([BLOCK], dtype=tl.float32)"], [f"q_run += {t} * {t}"],
                        ["q_part = tl.sum(q_run, axis=0)"])
            return (["q_part = tl.zeros([], dtype=tl.float32)"], [f"q_part += tl.sum({t} * {t}, axis=0)"], [])

        def apply(t: str) -> list[str]:
            return [f"w = {load('w_ptr + cols', 'mask', None, sk.g['evict_w'])}.to(tl.float32)", f"y = {t} * rstd * w"]

        return SplitMath(
            parts=("q",), empty=("0.0",), other="0.0", convert="{t}.to(tl.float32)",
            chunk_stats=lambda t: [f"q_part = tl.sum({t} * {t}, axis=0)"], running=running,
            combine=["rstd = tl.rsqrt(tl.sum(part_q, axis=0) / N_COLS + eps)"],
            apply=apply, apply_kept=apply("x"), inputs=("w_ptr",), scalars=("eps",))

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        sk = self.skeleton(genome, problem, target)
        head = ["def rmsnorm(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None,",
                f"            eps: float = {EPS!r}) -> torch.Tensor:",
                '    """RMSNorm over the last dimension of x, times `weight` (one per column), in x\'s dtype."""']
        checks = [
            "    if not isinstance(weight, torch.Tensor) or weight.shape != (n_cols,) or weight.device != x.device:",
            "        raise ValueError(f\"weight must have shape ({n_cols},) on {x.device}; got {_described(weight)}\")"]
        if sk.g["split"] > 1:
            return render_split(self, sk, problem, target, self.split_math(sk), True, head, ("x", "weight"), checks,
                                ", eps")
        summary = ("Single pass: each program loads the weight once and reads whole rows once." if sk.single else
                   "Looped: BLOCK-wide steps sum the squares, then a second pass reads x and w and writes.")
        lines = self.header(sk, problem, target, summary)
        lines += sk.signature(self.kernel_name, "x_ptr, w_ptr, y_ptr, n_rows, eps")
        prologue = [self._weight(sk)] if sk.single else []
        lines += sk.kernel_body(prologue, self._single(sk) if sk.single else self._looped(sk))
        lines += ["", ""] + self.module_tail(sk, head, ("x", "weight"), checks, "x, weight, out, n_rows, eps", ", eps")
        return "\n".join(lines) + "\n"

    def call_into(self, entry: Any, *args: Any, out: Any) -> Any:
        x, weight, *eps = args  # eps comes after `out` in the entry function
        return entry(x, weight, out=out, **({"eps": eps[0]} if eps else {}))

    def eager_entry(self, entry: Any) -> Any:
        def rmsnorm(x: Any, weight: Any, eps: float = EPS) -> Any:
            return entry(x, weight, eps=eps)

        return rmsnorm

    # -- judging a kernel ---------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        import torch

        x = self.random_rows(problem, seed, device)
        if torch.device(device).type == "meta":
            return x, torch.empty(problem.dims["cols"], device=device, dtype=x.dtype)
        gen = torch.Generator(device=device).manual_seed(seed + 1_000_003)
        weight = torch.randn(problem.dims["cols"], generator=gen, device=device, dtype=x.dtype)
        return x, weight

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        return super().tensor_shapes(problem) + [(problem.dims["cols"],)]  # and the weight

    def reference(self, *inputs: Any) -> Any:
        import torch

        x, weight = inputs
        xf = x.to(torch.float32)
        return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * weight.to(torch.float32)

    def baselines(self) -> list[Baseline]:
        return [
            Baseline("torch_eager", _eager,
                     "torch.nn.functional.rms_norm where torch has it (2.4+), else the fp32 formula cast back"),
            Baseline("torch_compile", _compiled,
                     "torch.compile of the fp32 formula x * rsqrt(mean(x^2) + eps) * w, default mode, static shape"),
        ]

    def selfcheck_lines(self, problem: Problem) -> list[str]:
        return [
            f"    weight = torch.randn({problem.dims['cols']}, generator=gen, device=device, dtype=x.dtype)",
            "    return (x, weight)",
            "",
            "",
            "def selfcheck_reference(x, weight):",
            "    xf = x.float()",
            f"    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + {EPS!r}) * weight.float()",
            "",
            "",
            f"def selfcheck_baseline(x, weight, eps={EPS!r}):  # eps: as the entry takes it (a zoo's fallback)",
            "    if hasattr(torch.nn.functional, 'rms_norm'):",
            "        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)",
            "    xf = x.float()",
            "    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)",
            "",
            "",
            "def problem_sizes(x, weight):",
            "    return (x.numel() // x.shape[-1], x.shape[-1])",
        ]

    def flops(self, problem: Problem) -> int:
        """~4 per element: square, add, and two multiplies (rstd and weight)."""
        return 4 * problem.dims["rows"] * problem.dims["cols"]

    def bytes(self, problem: Problem) -> int:
        """x and the weight read once, y written once."""
        m, n = problem.dims["rows"], problem.dims["cols"]
        return (2 * m * n + n) * self.element_bytes(problem)
