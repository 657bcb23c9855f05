"""Row-wise softmax: y[i, :] = exp(x[i, :] - max_i) / sum(exp(x[i, :] - max_i)) over a contiguous [M, N] input.

Rendered kernels work in base 2 (x * log2(e), then exp2) and in fp32 whatever the input dtype. A single-pass
kernel reads each row once; a looped kernel reads it twice: once for the running max and sum (online
softmax), once to write the output.
"""

from __future__ import annotations

from typing import Any

from evo.problem import Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.softmax import SoftmaxFamily
from operators.base import Baseline
from operators.rowwise import RowwiseOperator, Skeleton, fresh_function, load, store
from operators.rowwise_split import SplitMath, render_split

__all__ = ["SoftmaxOperator"]

LOG2E = "1.4426950408889634"
NEG_INF = 'float("-inf")'


def _torch_softmax(x: Any) -> Any:
    import torch

    return torch.softmax(x, dim=-1)


def _eager(problem: Problem) -> Any:
    return _torch_softmax


def _compiled(problem: Problem) -> Any:
    import torch

    return torch.compile(fresh_function(_torch_softmax), dynamic=False)


class SoftmaxOperator(RowwiseOperator):
    name = "softmax"
    entry = "softmax"
    torch_schema = "(Tensor x) -> Tensor"
    kernel_name = "softmax_kernel"

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return SoftmaxFamily(overrides)

    # -- code generation ----------------------------------------------------------------------------
    def _single(self, sk: Skeleton) -> list[str]:
        x = load("x_ptr + offs", "mask", NEG_INF, sk.g["evict_x"])
        return [
            f"x = {x}",
            f"x = x.to(tl.float32) * {LOG2E}",
            "m = tl.max(x, axis=1)",
            "e = tl.exp2(x - m[:, None])",
            "y = e * (1.0 / tl.sum(e, axis=1))[:, None]",
            store("y_ptr + offs", "y.to(y_ptr.dtype.element_ty)", sk.g["store_y"]),
        ]

    def _looped(self, sk: Skeleton) -> list[str]:
        g = sk.g
        first = load("x_ptr + row_start + cols[None, :]", "mask", NEG_INF, g["keep_x"])
        second = load("x_ptr + row_start + cols[None, :]", "mask", NEG_INF, g["evict_x"])
        if g["stats"] == "lane":
            # running max and sum per lane: no cross-thread reduction inside the loop. The max starts finite:
            # a lane past the row's end in every step (BLOCK > N) must not compute -inf - (-inf).
            init = ["m = tl.full([ROWS, BLOCK], -3.0e38, tl.float32)",
                    "s = tl.zeros([ROWS, BLOCK], dtype=tl.float32)"]
            update = [f"x = {first}",
                      f"x = x.to(tl.float32) * {LOG2E}",
                      "m_new = tl.maximum(m, x)",
                      "s = s * tl.exp2(m - m_new) + tl.exp2(x - m_new)",
                      "m = m_new"]
            merge = ["m_row = tl.max(m, axis=1)",
                     "r = 1.0 / tl.sum(s * tl.exp2(m - m_row[:, None]), axis=1)"]
        else:
            # running max and sum per row, rescaled whenever the max grows
            init = ['m_row = tl.full([ROWS], float("-inf"), tl.float32)',
                    "s = tl.zeros([ROWS], dtype=tl.float32)"]
            update = [f"x = {first}",
                      f"x = x.to(tl.float32) * {LOG2E}",
                      "m_new = tl.maximum(m_row, tl.max(x, axis=1))",
                      "s = s * tl.exp2(m_row - m_new) + tl.sum(tl.exp2(x - m_new[:, None]), axis=1)",
                      "m_row = m_new"]
            merge = ["r = 1.0 / s"]
        write = [f"x = {second}",
                 f"x = x.to(tl.float32) * {LOG2E}",
                 "y = tl.exp2(x - m_row[:, None]) * r[:, None]",
                 store("y_ptr + row_start + cols[None, :]", "y.to(y_ptr.dtype.element_ty)", g["store_y"])]
        return init + sk.column_loop(update) + merge + sk.column_loop(write)

    def split_math(self) -> SplitMath:
        """Chunk max m and sum s of exp2(x - m); combined as max_i m_i and sum_i s_i * exp2(m_i - max)."""
        def chunk_stats(t: str) -> list[str]:
            return [f"m_part = tl.max({t}, axis=0)",
                    f"m_own = tl.where(m_part > {NEG_INF}, m_part, 0.0)  # a chunk past the row's end is all -inf",
                    f"e = tl.exp2({t} - m_own)",
                    "s_part = tl.sum(e, axis=0)"]

        def running(t: str, per_lane: bool) -> tuple[list[str], list[str], list[str]]:
            if per_lane:  # as the looped kernel's lane stats: the max starts finite, so no -inf - (-inf)
                return (["m_run = tl.full([BLOCK], -3.0e38, tl.float32)",
                         "s_run = tl.zeros([BLOCK], dtype=tl.float32)"],
                        [f"m_new = tl.maximum(m_run, {t})",
                         f"s_run = s_run * tl.exp2(m_run - m_new) + tl.exp2({t} - m_new)", "m_run = m_new"],
                        ["m_part = tl.max(m_run, axis=0)", "s_part = tl.sum(s_run * tl.exp2(m_run - m_part), axis=0)"])
            return ([f"m_run = tl.full([], {NEG_INF}, tl.float32)", "s_run = tl.zeros([], dtype=tl.float32)"],
                    [f"m_new = tl.maximum(m_run, tl.max({t}, axis=0))",
                     f"m_sub = tl.where(m_new > {NEG_INF}, m_new, 0.0)  # steps past the row's end are all -inf",
                     f"s_run = s_run * tl.exp2(m_run - m_sub) + tl.sum(tl.exp2({t} - m_sub), axis=0)",
                     "m_run = m_new"],
                    ["m_part = m_run", "s_part = s_run"])

        return SplitMath(
            parts=("m", "s"), empty=(NEG_INF, "0.0"), other=NEG_INF, convert=f"{{t}}.to(tl.float32) * {LOG2E}",
            chunk_stats=chunk_stats, running=running,
            combine=["m_row = tl.max(part_m, axis=0)", "r = 1.0 / tl.sum(part_s * tl.exp2(part_m - m_row), axis=0)"],
            apply=lambda t: [f"y = tl.exp2({t} - m_row) * r"],
            apply_kept=["y = e * (tl.exp2(m_own - m_row) * r)  # the chunk's exponentials, rescaled to the row's max"])

    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        sk = self.skeleton(genome, problem, target)
        g = sk.g
        head = ["def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:",
                '    """Softmax over the last dimension of x, in x\'s dtype."""']
        if g["split"] > 1:
            return render_split(self, sk, problem, target, self.split_math(), g["stats"] == "lane", head, ("x",), [])
        summary = ("Single pass: each program keeps whole rows in registers and reads them once." if sk.single else
                   f"Looped: BLOCK-wide steps, online max/sum per {g['stats']}, then a second pass that writes.")
        lines = self.header(sk, problem, target, summary)
        lines += sk.signature(self.kernel_name, "x_ptr, y_ptr, n_rows")
        lines += sk.kernel_body([], self._single(sk) if sk.single else self._looped(sk))
        lines += ["", ""] + self.module_tail(sk, head, ("x",), [], "x, out, n_rows")
        return "\n".join(lines) + "\n"

    # -- judging a kernel ---------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        return (self.random_rows(problem, seed, device),)

    def reference(self, *inputs: Any) -> Any:
        import torch

        (x,) = inputs
        return torch.softmax(x.to(torch.float32), dim=-1)

    def tolerance(self, problem: Problem) -> float:
        # Beyond ~10^4 columns most outputs fall below fp16's smallest normal number (6e-5), where its
        # subnormals keep fewer bits: fp16's own rounding error grows with the width (1e-3 at 10^5).
        extra = 1e-7 * problem.dims["cols"] if problem.dtype == "fp16" else 0.0
        return super().tolerance(problem) + extra

    def baselines(self) -> list[Baseline]:
        return [
            Baseline("torch_eager", _eager, "torch.softmax(x, dim=-1)"),
            Baseline("torch_compile", _compiled, "torch.compile(torch.softmax), default mode, static shape"),
        ]

    def selfcheck_lines(self, problem: Problem) -> list[str]:
        return [
            "    return (x,)",
            "",
            "",
            "def selfcheck_reference(x):",
            "    return torch.softmax(x.float(), dim=-1)",
            "",
            "",
            "def selfcheck_baseline(x):",
            "    return torch.softmax(x, dim=-1)",
            "",
            "",
            "def problem_sizes(x):",
            "    return (x.numel() // x.shape[-1], x.shape[-1])",
        ]

    def flops(self, problem: Problem) -> int:
        """~5 per element: max, subtract, exp, sum, scale (an exponential counted as one)."""
        return 5 * problem.dims["rows"] * problem.dims["cols"]

    def bytes(self, problem: Problem) -> int:
        """x read once and y written once."""
        return 2 * problem.dims["rows"] * problem.dims["cols"] * self.element_bytes(problem)
