"""What softmax and RMSNorm share: the shape ([M, N], rows by columns), inputs, byte counts, tolerances, and
the skeleton of a rendered row-wise kernel (row-block loop, row offsets, masks, cache hints).

The row width reaches the kernel as the constexpr N_COLS (the launcher passes x.shape[-1], so each width
compiles its own specialisation): the compiler then knows each row's alignment (5000 bf16 elements are
10000 bytes, a multiple of 16, which a runtime width not divisible by 16 would hide, costing the 16-byte
vector loads) and the column mask stays uniform within a vector, so masking every width costs nothing and
one kernel serves every width. The number of rows is a runtime argument.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evo.launch import runtime_source
from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, InvalidGenome
from genomes.rowwise import ELEM_BYTES
from operators._template import jit_def
from operators.base import Operator

__all__ = ["RowwiseOperator", "Skeleton", "load", "store", "fresh_function", "TOLERANCE"]

# Relative Frobenius error accepted per dtype: a few units of the output's rounding error (the reference
# is exact fp32; bf16 keeps 8 bits of mantissa, fp16 11), far below what a wrong column or row gives.
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}


def load(ptr: str, mask: str | None, other: str | None, evict: str) -> str:
    """A tl.load call with only the arguments that are not defaults."""
    args = [ptr]
    if mask:
        args.append(f"mask={mask}")
        if other is not None:
            args.append(f"other={other}")
    if evict != "none":
        args.append(f'eviction_policy="{evict}"')
    return f"tl.load({', '.join(args)})"


def store(ptr: str, value: str, hint: str) -> str:
    """A masked tl.store call with the output cache hint of gene store_y."""
    extra = {"none": "", "evict_first": ', eviction_policy="evict_first"', "streaming": ', cache_modifier=".cs"'}
    return f"tl.store({ptr}, {value}, mask=mask{extra[hint]})"


def fresh_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of `fn` with its own code object: torch.compile keeps its compiled graphs (and its recompile
    limit) per code object, so a copy per problem compiles that problem's shape statically, once."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


@dataclass(frozen=True)
class Skeleton:
    """Facts about one rendered kernel that both operators' bodies read."""

    g: dict[str, Any]

    @property
    def single(self) -> bool:
        return self.g["mode"] == "single"

    @property
    def row_masked(self) -> bool:
        # one row per program never overruns: the grid (or the persistent loop) stops at the last row
        return self.g["ROWS"] > 1

    @property
    def mask_expr(self) -> str:
        return "row_mask[:, None] & col_mask[None, :]" if self.row_masked else "col_mask[None, :]"

    @property
    def has_loop(self) -> bool:
        """Whether the kernel loops (over columns, or over row blocks when persistent): only then does the
        pipelining depth mean anything, and only then is it rendered (so that the same kernel renders the
        same source whatever num_stages says)."""
        return not self.single or self.g["persistent"] > 0

    @property
    def pipelined(self) -> bool:
        """A loop streams the loads and pipelining is asked for (the family's `pipelined` rule)."""
        return self.g["num_stages"] > 1 and self.has_loop

    @property
    def loop_stages(self) -> str:
        return ", num_stages=NUM_STAGES" if self.pipelined else ""

    def signature(self, name: str, runtime: str, consts: tuple[str, ...] = ("N_COLS", "ROWS", "BLOCK")) -> list[str]:
        """The @triton.jit def line(s): runtime arguments, then the constexprs `consts` (and NUM_STAGES when the
        kernel pipelines its loads)."""
        consts = [*consts] + (["NUM_STAGES"] if self.pipelined else [])
        return jit_def(name, runtime.split(", ") + [f"{c}: tl.constexpr" for c in consts])

    def column_loop(self, body: list[str]) -> list[str]:
        """A loop over BLOCK-wide column steps of the current rows (looped kernels)."""
        head = [f"for start in tl.range(0, N_COLS, BLOCK{self.loop_stages}):",
                "    cols = start + tl.arange(0, BLOCK)",
                "    col_mask = cols < N_COLS",
                f"    mask = {self.mask_expr}"]
        return head + ["    " + line for line in body]

    def kernel_body(self, prologue: list[str], body: list[str]) -> list[str]:
        """Row-block iteration around `body` (lines at the row level); `prologue` runs once per program."""
        out = []
        if self.single:
            out += ["cols = tl.arange(0, BLOCK)", "col_mask = cols < N_COLS"]
        out += prologue
        rows = ["rows = rb * ROWS + tl.arange(0, ROWS)"]
        if self.row_masked:
            rows.append("row_mask = rows < n_rows")
        rows.append("row_start = rows.to(tl.int64)[:, None] * N_COLS  # 64-bit: M * N may exceed 2**31")
        if self.single:
            rows += ["offs = row_start + cols[None, :]", f"mask = {self.mask_expr}"]
        if self.g["persistent"]:
            stages = self.loop_stages if self.single else ""
            out.append(f"for rb in tl.range(tl.program_id(0), tl.cdiv(n_rows, ROWS), tl.num_programs(0){stages}):")
            out += ["    " + line for line in rows + body]
        else:
            out.append("rb = tl.program_id(0)")
            out += rows + body
        return ["    " + line for line in out]


class RowwiseOperator(Operator):
    """Base of row-wise operators over a contiguous [M, N] input; subclasses render their kernel body."""

    dims = ("rows", "cols")
    example = (4096, 8192)
    throughput_unit = "GB/s"
    kernel_name = ""  # name of the @triton.jit function in a rendered module

    # -- code generation ----------------------------------------------------------------------------
    def skeleton(self, genome: Genome, problem: Problem, target: Target) -> Skeleton:
        """The skeleton of a valid genome's kernel; InvalidGenome (a ValueError) for an invalid one."""
        reasons = self.family.violations(genome, problem, target)
        if reasons:
            raise InvalidGenome(f"genome {genome} is not valid for {problem.key}: {'; '.join(reasons)}")
        return Skeleton(genome.as_dict())

    def header(self, sk: Skeleton, problem: Problem, target: Target, summary: str) -> list[str]:
        g = sk.g
        lines = [
            f'"""evo kernel: {self.name} of rows of {problem.dims["cols"]} elements, rendered for {problem.key} '
            f'on {target.name}.',
            "",
            summary,
            '"""',
            "",
            "import torch",
            "import triton",
            "import triton.language as tl",
            "",
            runtime_source(),
            "",
            f"N_COLS = {problem.dims['cols']}  # the row width this kernel was rendered (and tuned) for",
            f"ROWS = {g['ROWS']}",
            f"BLOCK = {g['BLOCK']}",
            f"NUM_WARPS = {g['num_warps']}",
        ]
        if sk.has_loop:
            lines.append(f"NUM_STAGES = {g['num_stages']}")
        if g["persistent"]:
            lines.append(f"PROGRAMS = {g['persistent'] * target.num_sms}  "
                         f"# persistent grid: {g['persistent']} per SM of {target.num_sms}")
        return lines + ["", ""]

    def launch_options(self, sk: Skeleton) -> str:
        return '{"num_warps": NUM_WARPS, "num_stages": NUM_STAGES}' if sk.has_loop else '{"num_warps": NUM_WARPS}'

    def module_tail(self, sk: Skeleton, head: list[str], tensors: tuple[str, ...], checks: list[str], args: str,
                    scalars: str = "", setup: list[str] | None = None, launch: list[str] | None = None,
                    inspect: tuple[str, ...] | list[str] = ()) -> list[str]:
        """The module's tail: `_plan` (checks, grid and the bound kernel, once per argument signature) and the entry
        function. `head` is the entry's def line(s) and docstring, `tensors` its tensor parameters before `out`,
        `checks` plan lines checking them beyond x, `args` the kernel's runtime arguments and `scalars` the
        entry's parameters after `out` that are passed on every call (", eps"). `setup` (plan lines after n_rows,
        binding `kernel`) and `launch` (the run's lines launching it) replace those of the one-launch kernels;
        `inspect` lines set more attributes of `run` for inspection."""
        params = ", ".join(tensors)
        blocks = "triton.cdiv(n_rows, ROWS)"
        grid = f"(min({blocks}, PROGRAMS),)" if sk.g["persistent"] else f"({blocks},)"
        consts = "n_cols, ROWS, block" + (", NUM_STAGES" if sk.pipelined else "")
        if sk.single:
            block = ["    # single pass: the block holds the whole row (wider rows than BLOCK get a wider block)",
                     "    block = BLOCK if n_cols <= BLOCK else triton.next_power_of_2(n_cols)"]
        else:
            block = ["    block = BLOCK"]
        if setup is None:
            setup = [*block, f"    kernel = BoundKernel({self.kernel_name}, {grid}, {self.launch_options(sk)})"]
        if launch is None:
            launch = [f"            kernel({args}, {consts})"]
        contiguous = " and ".join(f"{t}.is_contiguous()" for t in tensors)
        return [
            "_PLANS = PlanCache()  # argument signature -> run(...): checks, grid and the bound kernel, done once",
            "",
            "",
            "def _described(t):",
            "    if isinstance(t, torch.Tensor):",
            "        return f\"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}\"",
            "    return repr(t)[:60]",
            "",
            "",
            f"def _plan({params}, out):",
            '    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their',
            '    signature: sizes, grid and the bound kernel. Returns run(...) for every call of this signature."""',
            "    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] == 0:",
            "        raise ValueError(f\"x must be a tensor with rows of at least one element; got {_described(x)}\")",
            "    n_cols = x.shape[-1]",
            "    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != x.shape",
            "                            or out.dtype != x.dtype or out.device != x.device",
            "                            or not out.is_contiguous()):",
            "        raise ValueError(\"out must be a contiguous tensor of x's shape, dtype and device\")",
            *checks,
            "    n_rows = x.numel() // n_cols",
            *setup,
            f"    contiguous = {contiguous}  # else each call copies into contiguous rows first",
            "",
            f"    def run({params}, out{scalars}):",
            "        if not contiguous:",
            *[f"            {t} = {t}.contiguous()" for t in tensors],
            "        if out is None:",
            "            out = torch.empty_like(x)",
            "        if n_rows:",
            *launch,
            "        return out",
            "",
            "    run.kernel = kernel  # for inspection",
            *inspect,
            "    return run",
            "",
            "",
            *head,
            "    key = (" + ", ".join(f"signature({t})" for t in tensors)
            + ", None if out is None else signature(out))",
            "    run = _PLANS.get(key)",
            "    if run is None:",
            f"        run = _PLANS.add(key, _plan({params}, out))",
            f"    return run({params}, out{scalars})",
        ]

    def empty_output(self, *args: Any) -> Any:
        import torch

        return torch.empty_like(args[0], memory_format=torch.contiguous_format)

    # -- judging a kernel ---------------------------------------------------------------------------
    def random_rows(self, problem: Problem, seed: int, device: str) -> Any:
        """Standard normal [M, N] input in the problem's dtype (never zeros), deterministic in `seed`."""
        import torch

        m, n = problem.dims["rows"], problem.dims["cols"]
        dtype = getattr(torch, DTYPES[problem.dtype])
        if torch.device(device).type == "meta":  # shapes and dtypes only, for compiling ahead of time
            return torch.empty(m, n, device=device, dtype=dtype)
        gen = torch.Generator(device=device).manual_seed(seed)
        return torch.randn(m, n, generator=gen, device=device, dtype=dtype)

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        m, n = problem.dims["rows"], problem.dims["cols"]
        return [(m, n), (m, n)]  # the rows in, the rows out

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels (see Operator.selfcheck_source)."""
        m, n = problem.dims["rows"], problem.dims["cols"]
        torch_dtype = f"torch.{DTYPES[problem.dtype]}"
        return "\n".join([
            "import torch",
            "",
            f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}",
            "",
            "",
            "def selfcheck_inputs(device):",
            '    """Fresh standard-normal inputs (never zeros), seeded."""',
            "    gen = torch.Generator(device=device).manual_seed(20240611)",
            f"    x = torch.randn({m}, {n}, generator=gen, device=device, dtype={torch_dtype})",
            *self.selfcheck_lines(problem),
        ]) + "\n"

    def selfcheck_lines(self, problem: Problem) -> list[str]:
        """The rest of the self-check: the end of selfcheck_inputs (returning the inputs), then
        selfcheck_reference, selfcheck_baseline and problem_sizes."""
        raise NotImplementedError

    def element_bytes(self, problem: Problem) -> int:
        return ELEM_BYTES[problem.dtype]
