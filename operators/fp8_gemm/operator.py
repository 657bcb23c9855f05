"""`fp8_gemm`: y[M, N] = (a[M, K] @ W[N, K]^T) scaled, a and W float8_e4m3fn, fp32 accumulation, y in the problem's
dtype (bf16 or fp16), W in nn.Linear's [out, in] layout as FP8 checkpoints store it. The scale mode is the variant:

  fp8_gemm           per-tensor scales: a_scale [1], w_scale [1]
  fp8_gemm+channel   per-channel: a_scale [M] (a token's dynamic scale; one for all rows also runs), w_scale [N]
  fp8_gemm+block     DeepSeek-V3's: a_scale [M, K/128] per 1x128 group, w_scale [ceil(N/128), K/128] per 128x128
                     block of W (K a multiple of 128)

The entry is `fp8_gemm(a, weight, a_scale, w_scale, out=None, out_dtype=None)`; y is in out_dtype, else out's dtype,
else the rendered problem's. As a torch op (evo.api) out_dtype is the op's fifth argument, always given (its fake
result must know it). The rendered module is a header (the genome's constants and the entry) above
operators/fp8_gemm/kernel.py pasted verbatim. Throughput is reported in TFLOP/s.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.fp8_gemm import MODES, SCALE_BLOCK, FP8GemmFamily
from genomes.rowwise import ELEM_BYTES
from operators._paste import pasted_source
from operators.base import Baseline, Operator
from operators.fp8_gemm.baselines import GROUPINGS, FP8Math, fp8_baselines, fp8_contenders

__all__ = ["FP8GemmOperator", "fp8_gemm_variant", "KERNEL_FILE", "TOLERANCE"]

KERNEL_FILE = Path(__file__).with_name("kernel.py")
SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")
# Relative Frobenius error accepted per output dtype: the products of e4m3 values are exact in fp32, so what is left
# is the output's rounding and the order (and, on Hopper without promotion, the precision) of the fp32 sums
TOLERANCE = {"fp16": 3e-3, "bf16": 1e-2}

_HEADER = '''"""{title}
"""

import torch
import triton
import triton.language as tl

{runtime}

# the genome's constants, as operators/fp8_gemm/kernel.py's plan reads them
CONFIG = {config}

_PLANS = PlanCache()  # argument signature -> run(...): checks, grid, workspace and the bound kernel, done once


def fp8_gemm(a, weight, a_scale, w_scale, out=None, out_dtype=None):
    """{doc}"""
    key = (signature(a), signature(weight), signature(a_scale), signature(w_scale),
           None if out is None else signature(out), out_dtype)
    run = _PLANS.get(key)
    if run is None:
        run = _PLANS.add(key, fp8_gemm_plan(a, weight, a_scale, w_scale, out, out_dtype, CONFIG))
    return run(a, weight, a_scale, w_scale, out)


'''

_SCALE_DOC = {"tensor": "a_scale and w_scale of one float32 element each",
              "channel": "a_scale[M] (or one element) and w_scale[N], float32",
              "block": "a_scale[M, K/128] per 1x128 group and w_scale[ceil(N/128), K/128] per 128x128 block, float32"}


class FP8GemmOperator(Operator):
    dims = ("M", "N", "K")
    dtypes = ("bf16", "fp16")  # of the output: the operands are float8_e4m3fn
    example = (16, 4096, 4096)
    entry = "fp8_gemm"
    throughput_unit = "TFLOP/s"

    def __init__(self, overrides: dict[str, list[Any]] | None = None, scales: str = "tensor") -> None:
        if scales not in MODES:
            raise ValueError(f"fp8_gemm's scale modes are {', '.join(MODES)}; got {scales!r}")
        self.scales = scales
        self.math = FP8Math(scales)
        self.name = "fp8_gemm" if scales == "tensor" else f"fp8_gemm+{scales}"
        super().__init__(overrides)

    # the op's schema (evo.api): the output dtype is an argument, as its fake result must know it
    torch_schema = "(Tensor a, Tensor weight, Tensor a_scale, Tensor w_scale, ScalarType out_dtype) -> Tensor"

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return FP8GemmFamily(overrides, mode=self.scales)

    def problem(self, sizes: tuple[int, ...] | list[int], dtype: str) -> Problem:
        """The problem (M, N, K); ValueError naming K when block scales do not cover it in whole groups."""
        problem = super().problem(sizes, dtype)
        if self.scales == "block" and problem.dims["K"] % SCALE_BLOCK:
            raise ValueError(f"{self.name}: K={problem.dims['K']} is not a multiple of {SCALE_BLOCK} (block scales "
                             f"cover whole 1x{SCALE_BLOCK} groups of K)")
        return problem

    # -- code generation --------------------------------------------------------------------------------
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        self.family.require(genome, problem, target, self.name)
        g = genome.as_dict()
        config = {"SCALES": self.scales, "OUT_DTYPE": DTYPES[problem.dtype], "BLOCK_M": g["BLOCK_M"],
                  "BLOCK_N": g["BLOCK_N"], "BLOCK_K": g["BLOCK_K"], "GROUP_M": g["GROUP_M"], "SPLIT_K": g["SPLIT_K"],
                  "SWAP_AB": g["swap_ab"], "PROMOTE": g["promote"], "MEMORY": g["memory"],
                  "PROGRAMS": g["persistent"] * target.num_sms, "NUM_WARPS": g["num_warps"],
                  "NUM_STAGES": g["num_stages"]}
        title = (f"evo kernel: {self.name} ({self.math.text}) rendered from genome {genome.hash} for {problem.key} on "
                 f"sm_{target.arch}.\n\n" + textwrap.fill(f"Genome: {genome}", 100))
        doc = (f"{self.math.text}, for a[..., K] and weight [N, K] float8_e4m3fn, {_SCALE_DOC[self.scales]}; returns "
               f"y[..., N] in out_dtype (or out's dtype; by default {DTYPES[problem.dtype]}).")
        return _HEADER.format(title=title, runtime=runtime_source().rstrip("\n"), config=_config_text(config),
                              doc=doc) + pasted_source(KERNEL_FILE)

    # -- as a torch op ----------------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        a, weight, out_dtype = args[0], args[1], args[4]
        return a.new_empty((*a.shape[:-1], weight.shape[0]), dtype=out_dtype)

    def call_into(self, entry: Any, *args: Any, out: Any) -> Any:
        return entry(*args[:4], out=out)

    def eager_entry(self, entry: Any) -> Any:
        """The op's positional out_dtype passed to the entry by name."""

        def fp8_gemm(a: Any, weight: Any, a_scale: Any, w_scale: Any, out_dtype: Any) -> Any:
            return entry(a, weight, a_scale, w_scale, out_dtype=out_dtype)

        return fp8_gemm

    # -- judging a kernel -------------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """a from a standard normal and W normal with variance 1/K (nn.Linear's scale), each quantized to e4m3 with
        the mode's scales (amax / 448 over its group: operators/fp8_gemm/quantize.py)."""
        import torch

        from operators.fp8_gemm.quantize import quantize

        d = problem.dims
        shapes = self.tensor_shapes(problem)[:-1]
        if torch.device(device).type == "meta":
            fp8 = torch.float8_e4m3fn
            return tuple(torch.empty(s, device=device, dtype=dt) for s, dt in
                         zip(shapes, (fp8, fp8, torch.float32, torch.float32), strict=True))
        gen = torch.Generator(device=device).manual_seed(int(seed))
        a = torch.randn(d["M"], d["K"], generator=gen, device=device, dtype=torch.float32)
        w = torch.randn(d["N"], d["K"], generator=gen, device=device, dtype=torch.float32) * d["K"] ** -0.5
        grouping_a, grouping_w = GROUPINGS[self.scales]
        a_q, a_scale = quantize(a, grouping_a)
        w_q, w_scale = quantize(w, grouping_w)
        return a_q, w_q, a_scale, w_scale

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        m, n, k = d["M"], d["N"], d["K"]
        scales = {"tensor": [(1,), (1,)], "channel": [(m,), (n,)],
                  "block": [(m, k // SCALE_BLOCK), (-(-n // SCALE_BLOCK), k // SCALE_BLOCK)]}[self.scales]
        return [(m, k), (n, k), *scales, (m, n)]

    def reference(self, *inputs: Any) -> Any:
        return self.math.reference(*inputs)

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        return fp8_baselines(self.math, self.make_inputs)

    def bench_baselines(self) -> list[Baseline]:
        return self.baselines() + fp8_contenders(self.math, self.make_inputs)

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels: the problem's constants above
        operators/fp8_gemm/selfcheck.py pasted verbatim."""
        head = ["import torch", "", f"SELFCHECK_SIZES = {problem.sizes!r}  # (M, N, K)",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_SCALES = {self.scales!r}",
                f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}", "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)

    def flops(self, problem: Problem) -> int:
        d = problem.dims
        return 2 * d["M"] * d["N"] * d["K"]

    def math_dtype(self, problem: Problem) -> str:
        """e4m3 operands: the speed of light is the FP8 tensor-core peak, not the output dtype's."""
        return "fp8"

    def bytes(self, problem: Problem) -> int:
        """a and W read once (a byte an element), their float32 scales, y written."""
        d = problem.dims
        scales = sum(_numel(s) for s in self.tensor_shapes(problem)[2:4])
        return (d["M"] + d["N"]) * d["K"] + 4 * scales + d["M"] * d["N"] * ELEM_BYTES[problem.dtype]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _config_text(config: dict[str, Any]) -> str:
    """The CONFIG dict as a module writes it, one entry per line."""
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in config.items()) + "}"


def fp8_gemm_variant(options: tuple[str, ...], overrides: dict[str, list[Any]] | None = None) -> FP8GemmOperator:
    """`fp8_gemm+channel` or `fp8_gemm+block` (the evo.operator_variants entry point of "fp8_gemm"); ValueError naming
    a bad option."""
    modes = [m for m in MODES if m != "tensor"]
    if len(options) != 1 or options[0] not in modes:
        raise ValueError(f"fp8_gemm takes one scale mode after '+', {' or '.join(modes)} (plain fp8_gemm: per-tensor "
                         f"scales); got {'+'.join(('fp8_gemm', *options))!r}")
    return FP8GemmOperator(overrides, options[0])
