"""`linear`: the decode GEMM y[M, N] = x[M, K] @ W[N, K]^T, W in nn.Linear's [out, in] layout read in place, and its
fused variants for a decoder layer's roles (issue 40's decode operators):

  linear+residual          y = x @ W^T + residual                      o_proj, down
  linear+swiglu            y = silu(x @ Wg^T) * (x @ Wu^T)             gate_up (W = [Wg; Wu], [2N, K])
  linear+geglu             y = gelu_tanh(x @ Wg^T) * (x @ Wu^T)        gate_up of Gemma (gelu_pytorch_tanh)
  linear+rmsnorm           y = rmsnorm(x) @ W^T                        qkv (the input norm in the prologue)
  linear+rmsnorm+bias      y = rmsnorm(x) @ W^T + bias                 qkv of models with a bias (Qwen2)
  linear+rmsnorm+swiglu    the post-attention norm, gate_up and SwiGLU in one kernel
  linear+rmsnorm+geglu     the same with GeGLU

The entry is `linear(x, weight[, norm_weight][, bias][, residual], out=None[, eps=1e-6])`; `out` may be the residual
itself (each element is read before it is written, by the program that writes it). Made for M <= 16 (decode); any
M runs. The rendered module is a header (the genome's constants and the entry) above operators/linear/kernel.py
pasted verbatim. Throughput is reported in GB/s: at these sizes the kernel streams W.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.linear import LinearFamily, block_m
from genomes.rowwise import ELEM_BYTES
from operators._paste import pasted_source
from operators.base import Baseline, Operator
from operators.linear.baselines import LinearMath, linear_baselines, linear_contenders

__all__ = ["LinearOperator", "linear_variant", "KERNEL_FILE", "OPTIONS"]

KERNEL_FILE = Path(__file__).with_name("kernel.py")
SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")
OPTIONS = ("rmsnorm", "swiglu", "geglu", "bias", "residual")  # in the order a name spells them
EPS = 1e-6

# Relative Frobenius error accepted per dtype: the GEMM's (operators/gemm/operator.py: fp32 tl.dot runs in tf32 on
# the GPU) with the epilogue variants' room (a rounded normed x, SwiGLU's product of two rounded-input products).
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2, "fp32": 2e-3}
FUSED_TOLERANCE = {"fp16": 3e-3, "bf16": 1.5e-2, "fp32": 3e-3}

_HEADER = '''"""{title}
"""

import torch
import triton
import triton.language as tl

{runtime}

# the genome's constants, as operators/linear/kernel.py's plan reads them
CONFIG = {config}

_PLANS = PlanCache()  # argument signature -> run(...): checks, grid, workspace and the bound kernel, done once


def linear(x, weight{params}, out=None{eps_param}):
    """{doc}"""
    key = (signature(x), signature(weight){signatures}, None if out is None else signature(out))
    run = _PLANS.get(key)
    if run is None:
        run = _PLANS.add(key, linear_plan(x, weight, {norm}, {bias}, {residual}, out, CONFIG))
    return run(x, weight, {norm}, {bias}, {residual}, out, {eps})


'''


class LinearOperator(Operator):
    dims = ("M", "N", "K")
    example = (1, 4096, 4096)
    entry = "linear"
    throughput_unit = "GB/s"

    def __init__(self, overrides: dict[str, list[Any]] | None = None, options: tuple[str, ...] = ()) -> None:
        unknown = [o for o in options if o not in OPTIONS]
        if unknown or len(set(options)) != len(options):
            raise ValueError(f"linear takes the options {', '.join(OPTIONS)} (each once, in that order); "
                             f"got {'+'.join(('linear', *options))!r}")
        if "swiglu" in options and "geglu" in options:
            raise ValueError("linear takes one gate, swiglu or geglu; got both")
        for gate in ("swiglu", "geglu"):
            if gate in options and ("residual" in options or "bias" in options):
                raise ValueError(f"linear+{gate} takes neither a residual (the gated output feeds the down projection) "
                                 "nor a bias (the gate and up projections of LLMs have none)")
        self.math = LinearMath("rmsnorm" in options, "residual" in options, "swiglu" in options, "bias" in options,
                               "geglu" in options)
        self.name = "+".join(("linear", *(o for o in OPTIONS if o in options)))
        params = ["Tensor x", "Tensor weight"] + [f"Tensor {e}" for e in self.math.operands] \
            + [f"float eps={EPS!r}"] * self.math.norm
        self.torch_schema = f"({', '.join(params)}) -> Tensor"
        super().__init__(overrides)

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return LinearFamily(overrides, tiles=2 if self.math.gated else 1, norm=self.math.norm)

    # -- code generation --------------------------------------------------------------------------------
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        self.family.require(genome, problem, target, self.name)
        g, mm = genome.as_dict(), self.math
        config = {"BLOCK_M": block_m(g, problem.dims["M"]), "BLOCK_N": g["BLOCK_N"], "BLOCK_K": g["BLOCK_K"],
                  "SPLIT_K": g["SPLIT_K"], "DOT": g["math"] == "dot", "REDUCE_AT_END": g["reduce_k"] == "end",
                  "ORDERED": g["reduction"] == "ordered", "NUM_WARPS": g["num_warps"], "NUM_STAGES": g["num_stages"],
                  "EVICT_W": "" if g["evict_w"] == "none" else g["evict_w"],
                  "NORM": mm.norm, "BIAS": mm.bias, "RESIDUAL": mm.residual, "SWIGLU": mm.swiglu,
                  "GEGLU": mm.geglu}
        title = (f"evo kernel: {self.name} ({mm.text}) rendered from genome {genome.hash} for {problem.key} on "
                 f"sm_{target.arch}.\n\n" + textwrap.fill(f"Genome: {genome}", 100))
        extra = list(mm.operands)
        return _HEADER.format(
            title=title, runtime=runtime_source().rstrip("\n"), config=_config_text(config),
            params="".join(f", {e}" for e in extra), eps_param=f", eps={EPS!r}" if mm.norm else "",
            doc=f"{mm.text}, for x[..., K] and weight {mm.weight_form}; returns y[..., N] in x's dtype.",
            signatures="".join(f", signature({e})" for e in extra),
            norm="norm_weight" if mm.norm else "None", bias="bias" if mm.bias else "None",
            residual="residual" if mm.residual else "None",
            eps="eps" if mm.norm else "0.0") + pasted_source(KERNEL_FILE)

    # -- as a torch op ----------------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        x, weight = args[:2]
        n = weight.shape[0] // 2 if self.math.gated else weight.shape[0]
        return x.new_empty((*x.shape[:-1], n))

    def call_into(self, entry: Any, *args: Any, out: Any) -> Any:
        if not self.math.norm:
            return entry(*args, out=out)
        tensors, eps = args[:2 + len(self.math.operands)], args[2 + len(self.math.operands):]
        return entry(*tensors, out=out, **({"eps": eps[0]} if eps else {}))

    def eager_entry(self, entry: Any) -> Any:
        """A norm variant's entry takes eps after `out`: the op's positional eps is passed by name."""
        if not self.math.norm:
            return entry

        def linear(*args: Any) -> Any:
            return self.call_into(entry, *args, out=None)

        return linear

    # -- judging a kernel -------------------------------------------------------------------------------
    def _w_rows(self, problem: Problem) -> int:
        return 2 * problem.dims["N"] if self.math.gated else problem.dims["N"]

    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """x[M, K] standard normal, W[N, K] (or [2N, K]) normal with variance 1/K as nn.Linear's weights are (outputs
        of unit size in every dtype), then norm_weight[K], bias[N] and residual[M, N] standard normal where the
        variant takes them."""
        import torch

        d = problem.dims
        dtype = getattr(torch, DTYPES[problem.dtype])
        shapes = self.tensor_shapes(problem)[:-1]
        if torch.device(device).type == "meta":
            return tuple(torch.empty(s, device=device, dtype=dtype) for s in shapes)
        gen = torch.Generator(device=device).manual_seed(int(seed))
        out = [torch.randn(s, generator=gen, device=device, dtype=torch.float32) for s in shapes]
        out[1] = out[1] * d["K"] ** -0.5
        return tuple(t.to(dtype) for t in out)

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        shapes = [(d["M"], d["K"]), (self._w_rows(problem), d["K"])]
        shapes += [(d["K"],)] * self.math.norm + [(d["N"],)] * self.math.bias + [(d["M"], d["N"])] * self.math.residual
        return shapes + [(d["M"], d["N"])]

    def reference(self, *inputs: Any) -> Any:
        return self.math.reference(*inputs, eps=EPS)

    def tolerance(self, problem: Problem) -> float:
        mm = self.math
        return (FUSED_TOLERANCE if mm.operands or mm.gated else TOLERANCE)[problem.dtype]

    def baselines(self) -> list[Baseline]:
        return linear_baselines(self.math, EPS)

    def bench_baselines(self) -> list[Baseline]:
        return self.baselines() + linear_contenders(self.math, EPS)

    def tuner_baselines(self, effort: str = "full", budget_s: int | None = None) -> list[Baseline]:
        return linear_contenders(self.math, EPS)

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels: the problem's constants above operators/linear/selfcheck.py
        pasted verbatim."""
        d, mm = problem.dims, self.math
        parts = tuple(o for o, on in (("rmsnorm", mm.norm), ("swiglu", mm.swiglu), ("geglu", mm.geglu),
                                      ("bias", mm.bias),
                                      ("residual", mm.residual)) if on)
        head = ["import torch", "", f"SELFCHECK_SIZES = ({d['M']}, {d['N']}, {d['K']})  # (M, N, K)",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_PARTS = {parts!r}",
                f"SELFCHECK_EPS = {EPS!r}", f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}", "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)

    def flops(self, problem: Problem) -> int:
        d = problem.dims
        return 2 * d["M"] * self._w_rows(problem) * d["K"]

    def bytes(self, problem: Problem) -> int:
        """W read once (the bulk), x read, y written, and the norm weight, bias and residual where they are read."""
        return sum(_numel(s) for s in self.tensor_shapes(problem)) * ELEM_BYTES[problem.dtype]


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _config_text(config: dict[str, Any]) -> str:
    """The CONFIG dict as a module writes it, one entry per line."""
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in config.items()) + "}"


def linear_variant(options: tuple[str, ...], overrides: dict[str, list[Any]] | None = None) -> LinearOperator:
    """`linear+<options>` (the evo.operator_variants entry point of "linear"); ValueError naming a bad option."""
    spelled = "+".join(("linear", *options))
    op = LinearOperator(overrides, tuple(options))
    if op.name != spelled:
        raise ValueError(f"spell the variant {op.name!r}, not {spelled!r} (options in the order "
                         f"{', '.join(OPTIONS)})")
    return op
