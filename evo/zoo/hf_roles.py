"""What a zoo op can serve in a Hugging Face model: its operand form (read from its operator's name) and the
token counts measured for this model's shapes, so a patched model runs evo's kernel only where the zoo has one.

A zoo module (`evo zoo MODEL --collect`, loaded by `evo.api.load_zoo`) dispatches ANY shape to the nearest measured
one, with a warning; a patched model asks first: a call whose token count (a GEMM's M, a norm's rows, attention's
query length) and dtype the zoo measured for this model's N and K runs the zoo's op, any other runs torch's own
code. The measured shapes are read from the module behind the op (`_EVO_VARIANTS` of an `evo export --all` module,
`_EVO_SIZES`/`_EVO_DTYPE` of a single export); an op without them (a plain callable) serves every token count.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from evo.zoo.uses import baseline_tokens

__all__ = ["OpForm", "op_form", "measured", "served_tokens", "tokens_to_run", "Bound", "pick", "DEFAULT_OPERATORS",
           "ROLE_OPERATORS", "TORCH_DTYPES", "DTYPE_NAMES"]

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}

# The operator a role's op is taken to be when it does not say (a plain callable, not one of evo.api's ops)
DEFAULT_OPERATORS = {"norm": "rmsnorm", "qkv": "gemm", "attention": "attention+causal", "o_proj": "gemm+residual",
                     "gate_up": "gemm+swiglu", "down": "gemm+residual", "lm_head": "gemm"}
# The operators that can serve each role of a Llama-like layer (and the head)
ROLE_OPERATORS = {
    "norm": ("rmsnorm",),
    "qkv": ("gemm", "gemm+bias", "linear", "linear+bias", "linear+rmsnorm", "linear+rmsnorm+bias"),
    "attention": ("attention+causal", "cache_attention"),
    "o_proj": ("gemm+residual", "gemm+bias+residual", "linear+residual", "linear+bias+residual"),
    "gate_up": ("gemm+swiglu", "linear+swiglu", "linear+rmsnorm+swiglu"),
    "down": ("gemm+residual", "gemm+bias+residual", "linear+residual", "linear+bias+residual"),
    "lm_head": ("gemm", "linear", "linear+rmsnorm"),  # a fused norm is refused with its own reason (hf_patch)
}


@dataclass(frozen=True)
class OpForm:
    """How a GEMM-like op takes its operands: `weight` "kn" (B = W^T, [K, N] row-major: the gemm operators) or "nk"
    (nn.Linear's [N, K] weight read in place: the linear operators); then the input RMSNorm's weight (the norm in
    the prologue), the bias, the residual, and eps after them (linear's order: x, weight, norm_weight, bias,
    residual, eps; gemm's epilogues: A, B, bias, residual)."""

    operator: str
    weight: str = "kn"
    bias: bool = False
    norm: bool = False
    residual: bool = False
    swiglu: bool = False

    def args(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
             norm: Any = None, residual: torch.Tensor | None = None) -> tuple[Any, ...]:
        """The op's positional arguments (`norm`: the RMSNorm module whose weight and eps a fused norm takes)."""
        out: tuple[Any, ...] = (x, weight)
        out += (norm.weight,) if self.norm else ()
        out += (bias,) if self.bias else ()
        out += (residual,) if self.residual else ()
        return out + ((float(norm.variance_epsilon),) if self.norm else ())


def op_form(operator: str) -> OpForm:
    """The form of a GEMM operator's op ("gemm+bias", "linear+rmsnorm+swiglu", ...); ValueError for another."""
    base, *options = operator.split("+")
    known = {"gemm": ("bias", "residual", "swiglu"), "linear": ("rmsnorm", "bias", "residual", "swiglu")}
    if base not in known or any(o not in known[base] for o in options):
        raise ValueError(f"{operator!r} is not a GEMM form a Llama-like layer uses")
    return OpForm(operator, "kn" if base == "gemm" else "nk", "bias" in options, "rmsnorm" in options,
                  "residual" in options, "swiglu" in options)


def measured(op: Callable[..., Any]) -> list[tuple[tuple[int, ...], str]] | None:
    """The (sizes, dtype) of every problem the module behind `op` holds a measured kernel for, or None where it
    does not say (a plain callable)."""
    entry = getattr(op, "entry", op)
    module = inspect.getmodule(entry)
    variants = getattr(module, "_EVO_VARIANTS", None)
    if isinstance(variants, dict):
        return [(tuple(int(s) for s in v["sizes"]), str(v["dtype"])) for v in variants.values()]
    sizes, dtype = getattr(module, "_EVO_SIZES", None), getattr(module, "_EVO_DTYPE", None)
    if isinstance(sizes, tuple) and isinstance(dtype, str):
        return [(tuple(int(s) for s in sizes), dtype)]
    return None


@dataclass(frozen=True)
class Bound:
    """A role's op bound to a model: what it computes (`form`: GEMM roles only) and the token counts it serves in
    `dtype` (None: every count, for an op that names no measured shapes). `key` is the zoo's name of the role (a
    role may have several ops, e.g. `linear_qkv` for decode and `qkv` for prefill)."""

    role: str
    op: Callable[..., Any]
    operator: str
    dtype: torch.dtype
    tokens: frozenset[int] | None
    form: OpForm | None = None
    key: str = ""

    def serves(self, tokens: int, dtype: torch.dtype) -> bool:
        return dtype == self.dtype and (self.tokens is None or tokens in self.tokens)


def pick(bounds: tuple[Bound, ...], tokens: int, dtype: torch.dtype) -> Bound | None:
    """The first of a role's ops that serves `tokens` rows in `dtype`; None: torch runs the call."""
    for b in bounds:
        if b.serves(tokens, dtype):
            return b
    return None


def served_tokens(role: str, shapes: list[tuple[tuple[int, ...], str]] | None, dims: tuple[int, ...], dtype: str
                  ) -> tuple[frozenset[int] | None, str]:
    """The token counts measured for `role` at this model's `dims` in `dtype` (GEMMs: (N, K); norm: (hidden,);
    attention: (heads, kv_heads, head_dim)), and, when there are none, why (one clause)."""
    if shapes is None:
        return None, ""
    if not any(d == dtype for _, d in shapes):
        have = sorted({d for _, d in shapes})
        return frozenset(), f"its kernels are {'/'.join(have)}, the model is {dtype}"
    if role == "attention":  # (batch, heads, kv_heads, q_len, kv_len, head_dim): keyed by the query length
        pick = [(s[3], (s[1], s[2], s[5])) for s, d in shapes if d == dtype and len(s) == 6]
    elif role == "norm":  # (rows, cols)
        pick = [(s[0], (s[1],)) for s, d in shapes if d == dtype and len(s) == 2]
    else:  # (M, N, K)
        pick = [(s[0], tuple(s[1:])) for s, d in shapes if d == dtype and len(s) == 3]
    tokens = frozenset(t for t, rest in pick if rest == dims)
    if tokens:
        return tokens, ""
    other = sorted({"x".join(map(str, rest)) for _, rest in pick})
    mine = "x".join(map(str, dims))
    return tokens, f"its kernels are for {', '.join(other) or 'other shapes'}, this model's is {mine}"


def tokens_to_run(op: Callable[..., Any], role: str, dims: tuple[int, ...], dtype: str
                  ) -> tuple[frozenset[int] | None, str, tuple[int, ...]]:
    """The token counts `op` runs for `role` (`served_tokens`: those measured at this model's `dims` in `dtype`,
    None for every count), less those where its zoo module runs its baseline; why, when none is left; and those
    baseline counts, sorted (torch's code runs there)."""
    tokens, why = served_tokens(role, measured(op), dims, dtype)
    baseline = tuple(sorted(baseline_tokens(op, role, dims, dtype))) if tokens else ()
    if baseline:
        tokens = tokens - frozenset(baseline)
        why = why or f"its zoo runs its baseline at every T it measured ({','.join(map(str, baseline))})"
    return tokens, why, baseline
