"""`moe_gate_up` and `moe_down`: the expert GEMMs of a Mixture-of-Experts MLP, tokens routed top-k to E experts, with
the weights in the layout Hugging Face checkpoints hold (transformers 5's MixtralExperts / Qwen-MoE experts):

  moe_gate_up(x[T, K], gate_up_proj[E, 2N, K], topk_ids[T, k]) -> h[T, k, N]
      h[t, j] = silu(x[t] @ Wg[e]^T) * (x[t] @ Wu[e]^T) with e = topk_ids[t, j] (Wg, Wu: the expert's first and last
      N rows)
  moe_down(h[T, k, K], down_proj[E, N, K], topk_ids[T, k], topk_weights[T, k]) -> y[T, N]
      y[t] = sum over j of topk_weights[t, j] * (h[t, j] @ W[e]^T), summed in slot order (deterministic)

Problems are (T, E, TOPK, N, K); for moe_down N is the hidden size and K the expert's intermediate size. The routing
(top-k of the router's logits) is the caller's, as the model computes it; its sort by expert runs inside each op. The
rendered module is a header (the genome's constants and the entry) above operators/moe/kernel.py pasted verbatim.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.moe import DIMS, MoEDownFamily, MoEGateUpFamily, programs
from genomes.rowwise import ELEM_BYTES
from operators._paste import pasted_source
from operators.base import Baseline, Operator
from operators.moe.baselines import MoEMath, moe_baselines, moe_contenders

__all__ = ["MoEGateUpOperator", "MoEDownOperator", "KERNEL_FILE", "TOLERANCE", "make_routing"]

KERNEL_FILE = Path(__file__).with_name("kernel.py")
SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")
# Relative Frobenius error accepted per dtype: linear's fused variants' (fp32 tl.dot runs in tf32 on the GPU; SwiGLU
# is a product of two rounded-input products)
TOLERANCE = {"fp16": 3e-3, "bf16": 1.5e-2, "fp32": 3e-3}

_HEADER = '''"""{title}
"""

import torch
import triton
import triton.language as tl

{runtime}

# the genome's constants, as operators/moe/kernel.py's plan reads them
CONFIG = {config}

_PLANS = PlanCache()  # argument signature -> run(...): checks, grid, workspace and the bound kernel, done once


def {entry}({params}, out=None):
    """{doc}"""
    key = ({signatures}, None if out is None else signature(out))
    run = _PLANS.get(key)
    if run is None:
        run = _PLANS.add(key, moe_plan({args}, out, CONFIG))
    return run({args}, out)


'''


def make_routing(tokens: int, experts: int, top_k: int, generator: Any, device: str) -> tuple[Any, Any]:
    """(topk_ids int64, topk_weights fp32) as Mixtral's router makes them from standard-normal logits: the top-k
    experts by logit, their softmax weights renormalised over the k."""
    import torch

    logits = torch.randn(tokens, experts, generator=generator, device=device, dtype=torch.float32)
    values, ids = torch.topk(torch.softmax(logits, dim=-1), top_k, dim=-1)
    return ids, values / values.sum(dim=-1, keepdim=True)


class _MoEOperator(Operator):
    dims = DIMS
    throughput_unit = "TFLOP/s"
    gate_up = True
    names: tuple[str, ...] = ()  # the entry's tensors

    def __init__(self, overrides: dict[str, list[Any]] | None = None) -> None:
        self.math = MoEMath(self.gate_up)
        self.torch_schema = f"({', '.join(f'Tensor {n}' for n in self.names)}) -> Tensor"
        super().__init__(overrides)

    def problem(self, sizes: tuple[int, ...] | list[int], dtype: str) -> Problem:
        """The problem (T, E, TOPK, N, K); ValueError naming TOPK when it routes to more experts than E."""
        problem = super().problem(sizes, dtype)
        d = problem.dims
        if d["TOPK"] > d["E"]:
            raise ValueError(f"{self.name}: TOPK={d['TOPK']} routes each token to more experts than E={d['E']}")
        return problem

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return (MoEGateUpFamily if self.gate_up else MoEDownFamily)(overrides)

    # -- code generation --------------------------------------------------------------------------------
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        self.family.require(genome, problem, target, self.name)
        g = genome.as_dict()
        config = {"GATE_UP": self.gate_up, "BLOCK_M": g["BLOCK_M"], "BLOCK_N": g["BLOCK_N"], "BLOCK_K": g["BLOCK_K"],
                  "GROUP_M": g["GROUP_M"], "TILE_MAJOR": g["work"] == "tile_major", "SWAP_AB": g["swap_ab"],
                  "PROGRAMS": programs(g, target), "ROUTE_IN_KERNEL": g["routing"] == "in_kernel",
                  "COMBINE_IN_KERNEL": g.get("combine", "in_kernel") == "in_kernel",
                  "NUM_WARPS": g["num_warps"], "NUM_STAGES": g["num_stages"]}
        title = (f"evo kernel: {self.name} ({self.math.text}) rendered from genome {genome.hash} for {problem.key} on "
                 f"sm_{target.arch}.\n\n" + textwrap.fill(f"Genome: {genome}", 100))
        args = "x, weight, topk_ids, None" if self.gate_up else "h, weight, topk_ids, topk_weights"
        params = "x, weight, topk_ids" if self.gate_up else "h, weight, topk_ids, topk_weights"
        doc = (f"{self.math.text}; weight {self._weight_form}, topk_ids [T, k] int; returns "
               + ("h[T, k, N] in x's dtype." if self.gate_up else "y[T, N] in h's dtype."))
        return _HEADER.format(
            title=title, runtime=runtime_source().rstrip("\n"), config=_config_text(config), entry=self.entry,
            params=params, doc=doc, args=args,
            signatures=", ".join(f"signature({p.strip()})" for p in params.split(","))) + pasted_source(KERNEL_FILE)

    @property
    def _weight_form(self) -> str:
        return "[E, 2N, K] (each expert's gate rows, then its up rows)" if self.gate_up else "[E, N, K]"

    # -- as a torch op ----------------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        a, weight, ids = args[:3]
        if self.gate_up:
            return a.new_empty((ids.shape[0], ids.shape[1], weight.shape[1] // 2))
        return a.new_empty((ids.shape[0], weight.shape[1]))

    # -- judging a kernel -------------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """The activations standard normal, each expert's weight normal with variance 1/K (nn.Linear's scale:
        outputs of unit size), the routing as Mixtral's router makes it from standard-normal logits."""
        import torch

        d = problem.dims
        dtype = getattr(torch, DTYPES[problem.dtype])
        shapes = self.tensor_shapes(problem)[:-1]
        if torch.device(device).type == "meta":
            made = [torch.empty(s, device=device, dtype=dtype) for s in shapes]
            made[2] = torch.empty(shapes[2], device=device, dtype=torch.int64)
            return tuple(made)
        gen = torch.Generator(device=device).manual_seed(int(seed))
        a = torch.randn(shapes[0], generator=gen, device=device, dtype=torch.float32).to(dtype)
        w = (torch.randn(shapes[1], generator=gen, device=device, dtype=torch.float32) * d["K"] ** -0.5).to(dtype)
        ids, weights = make_routing(d["T"], d["E"], d["TOPK"], gen, device)
        return (a, w, ids) if self.gate_up else (a, w, ids, weights.to(dtype))

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        t, e, k, n, kk = d["T"], d["E"], d["TOPK"], d["N"], d["K"]
        if self.gate_up:
            return [(t, kk), (e, 2 * n, kk), (t, k), (t, k, n)]
        return [(t, k, kk), (e, n, kk), (t, k), (t, k), (t, n)]

    def reference(self, *inputs: Any) -> Any:
        return self.math.reference(*inputs)

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        return moe_baselines(self.math)

    def bench_baselines(self) -> list[Baseline]:
        return self.baselines() + moe_contenders(self.math)

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels: the problem's constants above operators/moe/selfcheck.py
        pasted verbatim."""
        head = ["import torch", "", f"SELFCHECK_SIZES = {problem.sizes!r}  # (T, E, TOPK, N, K)",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_GATE_UP = {self.gate_up!r}",
                f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}", "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)

    def flops(self, problem: Problem) -> int:
        d = problem.dims
        return 2 * d["T"] * d["TOPK"] * (2 if self.gate_up else 1) * d["N"] * d["K"]

    def bytes(self, problem: Problem) -> int:
        """The weights of the experts the tokens reach, the activations read, the result written and the routing.
        The experts reached are those of the bench's routing on average (each token picks TOPK of the E at random:
        E * (1 - (1 - TOPK/E)^T)): at 16 tokens of Qwen-MoE's 60 top-4 about 40, where the bound T * TOPK = 64 (all
        60) read bandwidth shares of 135%; exactly TOPK at one token."""
        d = problem.dims
        hit = d["E"] * (1.0 - (1.0 - d["TOPK"] / d["E"]) ** d["T"])
        rows = (2 if self.gate_up else 1) * d["N"]
        elem = ELEM_BYTES[problem.dtype]
        acts = d["T"] * (d["K"] if self.gate_up else d["TOPK"] * d["K"])
        outs = d["T"] * (d["TOPK"] * d["N"] if self.gate_up else d["N"])
        return round(hit * rows * d["K"] + acts + outs) * elem + d["T"] * d["TOPK"] * 8


class MoEGateUpOperator(_MoEOperator):
    name = "moe_gate_up"
    entry = "moe_gate_up"
    example = (16, 8, 2, 14336, 4096)  # Mixtral-8x7B's experts
    gate_up = True
    names = ("x", "gate_up_proj", "topk_ids")


class MoEDownOperator(_MoEOperator):
    name = "moe_down"
    entry = "moe_down"
    example = (16, 8, 2, 4096, 14336)
    gate_up = False
    names = ("h", "down_proj", "topk_ids", "topk_weights")


def _config_text(config: dict[str, Any]) -> str:
    """The CONFIG dict as a module writes it, one entry per line."""
    return "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in config.items()) + "}"
