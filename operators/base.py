"""The operator interface: everything the engine needs to search kernels for one operator.

An operator pairs a genome family with code generation and the facts to judge a kernel by: a torch
reference in higher precision, a seeded input factory, the baselines users would pick instead, a
tolerance per dtype, and FLOP and byte counts for rooflines. The engine calls only what is declared here,
so adding an operator never changes the engine.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evo.problem import Problem, Target
from genomes.base import Genome, GenomeFamily

__all__ = ["Operator", "Baseline"]

# Nominal peaks (dense bf16 FLOP/s, HBM bytes/s of an H100) for the CPU smoke mode's model estimate only.
SMOKE_PEAK_FLOPS = 989e12
SMOKE_PEAK_BYTES = 3.35e12


@dataclass(frozen=True)
class Baseline:
    """A contender users would pick instead of an evo kernel. `make(problem)` returns a callable over
    the operator's inputs (so a baseline that needs set-up, e.g. torch.compile, does it once)."""

    name: str
    make: Callable[[Problem], Callable[..., Any]]
    doc: str = ""


class Operator(ABC):
    name: str = ""
    dims: tuple[str, ...] = ()  # shape dimension names, e.g. ("M", "N", "K")
    dtypes: tuple[str, ...] = ("fp16", "bf16", "fp32")
    entry: str = ""  # name of the launcher function in a rendered module, e.g. "matmul"
    throughput_unit: str = ""  # "TFLOP/s" or "GB/s": what `throughput` returns
    example: tuple[int, ...] = ()  # a typical shape, in `dims` order (shown by `evo genes`)

    def __init__(self, overrides: dict[str, list[Any]] | None = None) -> None:
        self.family: GenomeFamily = self.make_family(overrides)

    @abstractmethod
    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily: ...

    def problem(self, sizes: tuple[int, ...] | list[int], dtype: str) -> Problem:
        if dtype not in self.dtypes:
            raise ValueError(f"{self.name} does not support dtype {dtype!r}; supported: {list(self.dtypes)}")
        return Problem.make(self.name, self.dims, sizes, dtype)

    # -- code generation ----------------------------------------------------------------------------
    @abstractmethod
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        """Source of a standalone Triton module (imports only triton and torch) exposing `self.entry`."""

    # -- judging a kernel ---------------------------------------------------------------------------
    @abstractmethod
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """Fresh random inputs (never zeros), deterministic in `seed`."""

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]] | None:
        """The shapes of every input and of the result, computed without torch, so that an experiment's problems
        are checked before torch is imported (which takes seconds). None (the default) says "not known without
        torch": the check then makes the inputs on torch's meta device, after every other check."""
        return None

    @abstractmethod
    def reference(self, *inputs: Any) -> Any:
        """The exact result in float32 or better, computed with torch."""

    @abstractmethod
    def tolerance(self, problem: Problem) -> float:
        """Largest accepted relative error ||out - ref|| / ||ref|| for this problem's dtype and size."""

    @abstractmethod
    def baselines(self) -> list[Baseline]:
        """Contenders timed beside the kernel; the first is the primary one that ratios are taken against."""

    def bench_baselines(self) -> list[Baseline]:
        """Contenders for `evo bench` (which runs each once, with its own tuning, and times them side by
        side): by default `baselines()`; an operator may add slower-to-set-up ones (autotuners, compilers)
        that would be too costly beside every candidate of a search. The first stays the primary one."""
        return self.baselines()

    def tuner_baselines(self, effort: str = "full", budget_s: int | None = None) -> list[Baseline]:
        """Autotuners a search is compared with (`evo bench-search`): set up once, their setup time is their
        tuning time; `effort` (and a wall-clock `budget_s`) go to those that have levels (Helion). None by
        default."""
        return []

    @abstractmethod
    def flops(self, problem: Problem) -> int: ...

    @abstractmethod
    def bytes(self, problem: Problem) -> int:
        """Fewest bytes the operator must move: each input read once, each output written once."""

    def math_dtype(self, problem: Problem) -> str:
        """The dtype of the tensor-core math, whose peak bounds the operator's speed (evo.evaluate.roofline): the
        problem's by default; an operator whose operands are narrower than its output names theirs ("fp8")."""
        return problem.dtype

    # -- operators that write into an input in place (a KV cache) ------------------------------------------
    # the op's arguments it writes in place, as its schema marks them (`Tensor(a!) cache`): torch.compile and CUDA
    # graphs then let the kernel write them directly, without copies
    mutates_args: tuple[str, ...] = ()

    def written(self, inputs: tuple[Any, ...]) -> list[Any] | None:
        """Views of what the entry writes into its inputs, or None (the default) for an operator that writes none.
        They are results beside the returned ones: `reference` lists their exact values after those, and the check
        (evo.evaluate.check) judges them, poisons them before its judged run, and requires every other element of
        the inputs unchanged."""
        return None

    # -- kernels as torch ops (evo.api) ----------------------------------------------------------------
    # the op's schema over the entry's arguments without `out`, e.g. "(Tensor a, Tensor b) -> Tensor"
    torch_schema: str = ""

    def empty_output(self, *args: Any) -> Any:
        """An empty result for the entry's arguments (fake tensors too: it is the op's fake implementation)."""
        raise NotImplementedError(f"operator {self.name!r} declares no torch op")

    def call_into(self, entry: Callable[..., Any], *args: Any, out: Any) -> Any:
        """Run the entry function on the op's arguments, writing into `out`."""
        return entry(*args, out=out)

    def eager_entry(self, entry: Callable[..., Any]) -> Callable[..., Any]:
        """The entry function as a callable of the op's arguments: the entry itself unless an operator's entry
        takes some of them after `out` (then a wrapper, which costs a call)."""
        return entry

    # -- exported modules -----------------------------------------------------------------------------
    def selfcheck_source(self, problem: Problem) -> str | None:
        """Plain-torch code that `evo export` appends to a kernel so the module can check and time itself.

        None means the operator offers none (the export then has no self-check). The code is self-contained
        (it imports what it uses: torch and the standard library only) and must define at module level:
          selfcheck_inputs(device) -> tuple: fresh random inputs of `problem` (never zeros), as passed to
                                             the rendered module's entry function;
          selfcheck_reference(*inputs): the exact result, in float32 or better;
          selfcheck_baseline(*inputs): the primary baseline's result (what the kernel is timed against);
          SELFCHECK_TOLERANCE: the largest accepted ||out - ref|| / ||ref|| (as `tolerance(problem)`);
          problem_sizes(*inputs) -> tuple[int, ...]: the problem sizes the inputs form, in `dims` order.
        """
        return None

    def throughput(self, problem: Problem, ms: float) -> float:
        """Throughput in `throughput_unit` for a run of `ms` milliseconds."""
        if self.throughput_unit == "TFLOP/s":
            return self.flops(problem) / (ms * 1e-3) / 1e12
        return self.bytes(problem) / (ms * 1e-3) / 1e9

    # -- CPU smoke mode only ------------------------------------------------------------------------
    def smoke_cost(self, genome: Genome, problem: Problem) -> float:
        """A deterministic model estimate in milliseconds, used as fitness ONLY by the CPU smoke mode
        (evo.evaluate.smoke), never in a real run: it is not a timing. The generic model is the roofline time at
        nominal Hopper peaks, stretched by a factor in [1.25, 2.25) drawn from the genome's hash so that a
        smoke search has a fixed order to follow. An operator may override it with a model that knows its
        genome (e.g. tile efficiency)."""
        return self.smoke_roofline_ms(problem) * (1.25 + int(genome.hash[:8], 16) / 2**32)

    def smoke_roofline_ms(self, problem: Problem) -> float:
        """The roofline time at nominal Hopper peaks: the smoke mode's stand-in baseline (not a timing)."""
        return max(self.flops(problem) / SMOKE_PEAK_FLOPS, self.bytes(problem) / SMOKE_PEAK_BYTES) * 1e3
