"""From a model to the kernel problems of one decoder layer (and the model's head), and to one experiment per
operator holding all of that operator's shapes.

Per token count T (the rows a forward pass feeds each GEMM: the batch's tokens in prefill, the batch size in
decode), a layer of a Llama-like model runs: RMSNorm, the merged QKV projection, attention, the O projection with
the residual add, RMSNorm, the MLP's up (gate-up) projection with its activation, and the down projection with
the residual add. The model then runs the lm_head GEMM and a softmax over the vocabulary to sample.

Attention is that of one sequence: its T new tokens attend causally to `context` tokens already in the KV cache
and to each other (`attention+causal` of T queries against context + T keys, the mask aligned to the bottom
right); context 0 is a prefill of T tokens, a long context with a few tokens the decode of one sequence.

The plan per T (issue 40's decode operators):
- T <= LINEAR_MAX_TOKENS (16, where `linear` streams the weight): the projections are `linear` roles reading
  nn.Linear's weight in place, norms fused: linear_qkv (linear+rmsnorm: the input norm in its prologue; +bias
  where Q, K and V have one, as Qwen2's), linear_o_proj (linear+residual), linear_gate_up (linear+rmsnorm+swiglu:
  the post-attention norm fused), linear_down (linear+residual, linear+bias+residual with mlp_bias),
  linear_lm_head (linear+rmsnorm: the final norm fused); no separate norm. A GELU MLP keeps its gemm `up` role
  and a `norm` role for the post-attention norm (linear has no GELU), one note saying so.
- T > 16: the gemm roles (norm, qkv, o_proj, gate_up | up, down, lm_head).
- every T with context >= 1: `rope` (rope_cache: RoPE of q and k and the KV-cache write in one launch). Its
  problem's context dim is the cache's capacity less T (what its dispatch reads from the cache it is given): the
  layer's cache holds the context and room for the largest T planned (DecoderLayer(max_tokens=max(tokens))).
- T <= 16 with context >= 1: `cache_attention` too (the same sizes): a decode step's attention over a KV cache of
  fixed capacity with a mask, as transformers' static cache and the zoo's decode loop run it (K and V read once per
  KV head; attention+causal serves the calls without a mask).
- attention+causal and the sampling softmax at every T, as before.
A Gemma-2 layer (four norms, capped logits, a window on every other layer) is planned by evo.zoo.gemma_problems, a
layer with FP8 weights (`weights="fp8"`: its projections as fp8_gemm+channel) by evo.zoo.fp8_problems.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evo.experiment.spec import OBJECTIVES, Budget
from evo.problem import operator_file_stem
from evo.zoo.fp8_problems import WEIGHTS, fp8_layer_problems
from evo.zoo.gemma_problems import gemma_layer_problems
from evo.zoo.model import ModelSpec

__all__ = ["KernelProblem", "layer_problems", "experiments_for", "run_name", "LINEAR_MAX_TOKENS", "LINEAR_ROLES"]

LINEAR_MAX_TOKENS = 16  # the most rows the linear operators are planned for (their genome is made for M <= 16)
# role -> the gemm role it replaces at T <= LINEAR_MAX_TOKENS, and whether the norm before it is fused
LINEAR_ROLES = {"linear_qkv": ("qkv", True), "linear_o_proj": ("o_proj", False), "linear_gate_up": ("gate_up", True),
                "linear_down": ("down", False), "linear_lm_head": ("lm_head", True)}


@dataclass(frozen=True)
class KernelProblem:
    """One kernel a forward pass at `tokens` tokens runs: its role in the model, the evo operator that searches it
    (None: none does), its sizes in the operator's dims (gemm: M, N, K; rmsnorm/softmax: rows, cols; attention:
    batch, heads, kv_heads, q_len, kv_len, head_dim; linear: M, N, K; rope_cache: tokens, heads, kv_heads, head_dim,
    context), and how many times a layer (or, for the head, the model) runs it."""

    role: str
    operator: str | None
    sizes: tuple[int, ...]
    dtype: str
    tokens: int
    uses: int = 1
    scope: str = "layer"  # "layer": run by every decoder layer; "model": once per forward pass
    note: str = ""

    @property
    def searchable(self) -> bool:
        return self.operator is not None

    @property
    def shape_text(self) -> str:
        """The sizes as an experiment writes them (4096x14336x4096)."""
        return "x".join(str(s) for s in self.sizes)


def layer_problems(spec: ModelSpec, tokens: Sequence[int], dtype: str = "bf16", context: int = 0,
                   linear_max_tokens: int = LINEAR_MAX_TOKENS, weights: str = "bf16") -> list[KernelProblem]:
    """The kernel problems of one decoder layer and of the model's head, for each token count in `tokens`, with
    `context` tokens already in the KV cache; the linear roles serve T <= `linear_max_tokens` (0: the gemm roles at
    every T). `weights` "fp8": the projections' weights are e4m3 with per-channel scales (evo.zoo.fp8_problems;
    ValueError in one line for a layer it cannot serve)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ValueError(f"the context (tokens already in the KV cache) must be an integer >= 0; got {context!r}")
    attention_dtypes = _attention_dtypes()
    out: list[KernelProblem] = []
    for t in tokens:
        if isinstance(t, bool) or not isinstance(t, int) or t <= 0:
            raise ValueError(f"token counts must be positive integers; got {t!r}")
    room = max(tokens, default=0)
    for t in tokens:
        out.extend(_problems_at(spec, t, dtype, context, attention_dtypes, room, linear_max_tokens, weights))
    return out


def _problems_at(spec: ModelSpec, t: int, dtype: str, context: int, attention_dtypes: tuple[str, ...], room: int,
                 linear_max_tokens: int, weights: str = "bf16") -> list[KernelProblem]:
    h, inter = spec.hidden_size, spec.intermediate_size
    qkv_width = spec.q_size + 2 * spec.kv_size

    def kp(role: str, operator: str | None, sizes: tuple[int, ...], **kw: object) -> KernelProblem:
        return KernelProblem(role, operator, sizes, dtype, t, **kw)  # type: ignore[arg-type]

    attention = kp("attention", "attention+causal" if dtype in attention_dtypes else None,
                   (1, spec.num_attention_heads, spec.num_key_value_heads, t, context + t, spec.head_dim),
                   note="" if dtype in attention_dtypes else f"attention: no {dtype} kernels (the operator takes "
                                                             f"{', '.join(attention_dtypes)}); torch runs it")
    rope = _rope(spec, t, dtype, context, room)
    head = [kp("sampling_softmax", "softmax", (t, spec.vocab_size), scope="model")]
    if weights == "fp8":
        return fp8_layer_problems(spec, kp, t, attention, rope, t <= linear_max_tokens) + head
    if spec.post_norms:  # Gemma 2's layer
        return gemma_layer_problems(spec, kp, t, dtype, context, attention_dtypes, rope, t <= linear_max_tokens) + head
    if t <= linear_max_tokens:
        return _linear_problems(spec, kp, attention, rope) + head
    if spec.mlp == "swiglu":  # B is the merged gate-up weight [hidden, 2 * intermediate]
        up = kp("gate_up", "gemm+swiglu", (t, inter, h))
    else:
        up = kp("up", "gemm+" + ("bias+" if spec.mlp_bias else "") + spec.mlp, (t, inter, h))
    down = kp("down", "gemm+bias+residual" if spec.mlp_bias else "gemm+residual", (t, h, inter))
    mlp = _moe_problems(spec, kp, t, linear=False) if spec.num_experts else [up, down]
    return [
        kp("norm", "rmsnorm", (t, h), uses=2,
           note="norm: the input and post-attention norms of a layer; the final norm, before lm_head, has their shape"),
        kp("qkv", "gemm+bias" if spec.attention_bias else "gemm", (t, qkv_width, h)),
        *rope, attention,
        kp("o_proj", "gemm+residual", (t, h, spec.q_size)),
        *mlp,
        kp("lm_head", "gemm", (t, spec.vocab_size, h), scope="model"),
    ] + head


def _moe_problems(spec: ModelSpec, kp: Any, t: int, linear: bool) -> list[KernelProblem]:
    """A Mixture-of-Experts MLP's problems after its norm: the router's logits (linear or gemm, T x E x hidden), the
    routed experts' gate-up with SwiGLU (moe_gate_up) and down projection with the routing weights and the top-k sum
    (moe_down), and a shared expert's dense SwiGLU MLP where the model has one (Qwen-MoE)."""
    e, k, inter, h = spec.num_experts, spec.experts_per_token, spec.intermediate_size, spec.hidden_size
    note = ("moe: the router's softmax and top-k, and the residual add after moe_down, run in torch; each moe op "
            "sorts its tokens by expert itself")
    pre = "linear_" if linear else ""  # a role is served by one operator: the linear roles are named apart
    out = [kp(pre + "router", "linear" if linear else "gemm", (t, e, h), note=note),
           kp("moe_gate_up", "moe_gate_up", (t, e, k, inter, h), note=note),
           kp("moe_down", "moe_down", (t, e, k, h, inter), note=note)]
    if spec.shared_expert_size:
        s = spec.shared_expert_size
        shared = "moe: the shared expert's sigmoid gate (a [1, hidden] projection) and its sum run in torch"
        out += [kp(pre + "shared_gate_up", "linear+swiglu" if linear else "gemm+swiglu", (t, s, h), note=shared),
                kp(pre + "shared_down", "linear" if linear else "gemm", (t, h, s), note=shared)]
    return out


def _linear_problems(spec: ModelSpec, kp: Any, attention: KernelProblem, rope: list[KernelProblem]
                     ) -> list[KernelProblem]:
    """The problems of T <= LINEAR_MAX_TOKENS: the linear roles, a gemm role (with its norm apart) where a bias or a
    GELU MLP leaves linear out (one note names them)."""
    t = attention.tokens
    h, inter = spec.hidden_size, spec.intermediate_size
    qkv_width = spec.q_size + 2 * spec.kv_size
    kept: list[str] = []
    norms = 1  # the final norm is lm_head's prologue; a layer's norm is fused unless its GEMM keeps gemm
    qkv = kp("linear_qkv", "linear+rmsnorm+bias" if spec.attention_bias else "linear+rmsnorm", (t, qkv_width, h))
    up = None
    if spec.num_experts:  # the post-attention norm apart: the router and the experts read the normed rows
        norms += 1
    elif spec.mlp == "swiglu":
        up = kp("linear_gate_up", "linear+rmsnorm+swiglu", (t, inter, h))
    else:
        up = kp("up", "gemm+" + ("bias+" if spec.mlp_bias else "") + spec.mlp, (t, inter, h))
        kept.append(f"up ({up.operator}: linear has no {spec.mlp})")
        norms += 1
    down = kp("linear_down", "linear+bias+residual" if spec.mlp_bias else "linear+residual", (t, h, inter))
    note = (f"T <= {LINEAR_MAX_TOKENS}: {spec.name} keeps the gemm roles for {'; '.join(kept)}, with the norm "
            "before them apart") if kept else ""
    mlp = _moe_problems(spec, kp, t, linear=True) if spec.num_experts else [up, down]
    # with a KV cache: the attention of a decode step over a cache of fixed capacity, its mask (transformers' static
    # cache, the zoo's decode loop) as cache_attention sees it
    cache = attention.operator and attention.sizes[4] > t
    cached = [kp("cache_attention", "cache_attention", attention.sizes)] if cache else []
    out = [qkv, *rope, attention, *cached, kp("linear_o_proj", "linear+residual", (t, h, spec.q_size)), *mlp,
           kp("linear_lm_head", "linear+rmsnorm", (t, spec.vocab_size, h), scope="model")]
    if norms > 1:
        out.insert(0, kp("norm", "rmsnorm", (t, h), uses=norms - 1,
                         note="norm: the layer's norms that no linear role fuses (the final norm is linear_lm_head's)"))
    return [KernelProblem(**{**p.__dict__, "note": note}) if note and p.operator and p.operator.startswith("gemm")
            else p for p in out]


def _rope(spec: ModelSpec, t: int, dtype: str, context: int, room: int) -> list[KernelProblem]:
    """The rope role (rope_cache) where the layer has a KV cache (context >= 1) and the operator takes its heads and
    dtype; else none, with a note saying why."""
    if not context:
        return []
    import operators

    op = operators.get("rope_cache")
    sizes = (t, spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim, context + room - t)
    if spec.qk_norm:  # rope_cache rotates qkv's own output; Qwen3 norms each head of q and k first
        return [KernelProblem("rope", None, sizes, dtype, t, note=f"rope: {spec.name} norms each head's q and k "
                                                                  "before RoPE (qk_norm), which rope_cache does not; "
                                                                  "torch runs the norms, RoPE and the KV write")]
    try:
        op.problem(sizes, dtype)
    except ValueError as e:
        return [KernelProblem("rope", None, sizes, dtype, t, note=f"rope: rope_cache cannot serve {spec.name} "
                                                                  f"({e}); torch runs RoPE and the KV write")]
    return [KernelProblem("rope", "rope_cache", sizes, dtype, t)]


def _attention_dtypes() -> tuple[str, ...]:
    import operators

    return operators.get("attention+causal").dtypes


def experiments_for(spec: ModelSpec, tokens: Sequence[int], dtype: str = "bf16", *, wall_s: float = 30.0,
                    output: str = "runs/zoo", evaluations: int | None = None, executor: str = "ray",
                    context: int = 0, objective: str = "gpu", linear_max_tokens: int = LINEAR_MAX_TOKENS,
                    weights: str = "bf16") -> dict[str, str]:
    """Operator name -> the YAML text of one experiment searching all of that operator's shapes (a shape that
    several roles share is searched once). `wall_s` (and `evaluations`, when given) is the budget per problem;
    run directories go under `output`, each named `run_name(spec, operator)`; `executor` is "ray" (GPUs) or
    "smoke" (the CPU interpreter: fitness is not a timing, for trying the whole flow without a GPU). `objective`
    is the clock kernels are ranked by (evo.experiment.spec.OBJECTIVES): "gpu" by default, what a CUDA graph
    replays and so what serving engines' decode steps cost: at decode sizes the per-call clock is the host's
    launch cost, the same for every kernel, and ranks the kernels by its noise (both clocks are recorded)."""
    if isinstance(wall_s, bool) or not isinstance(wall_s, (int, float)) or not 0 < wall_s < math.inf:
        raise ValueError(f"wall_s must be a positive number of seconds; got {wall_s!r}")
    shapes: dict[str, dict[tuple[int, ...], list[str]]] = {}
    for p in layer_problems(spec, tokens, dtype, context, linear_max_tokens, weights):
        if p.operator is not None:
            shapes.setdefault(p.operator, {}).setdefault(p.sizes, []).append(f"{p.role} T={p.tokens}")
    if executor not in ("ray", "smoke"):
        raise ValueError(f"executor must be ray or smoke; got {executor!r}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}; got {objective!r}")
    budget = [f"  wall_s: {float(wall_s)!r}   # seconds per problem, from its first measured candidate"]
    if evaluations is not None:
        budget.append(f"  evaluations: {int(evaluations)}")
    floor = Budget.min_evaluations if evaluations is None else min(Budget.min_evaluations, int(evaluations))
    budget.append(f"  min_evaluations: {floor}   # wall time ends no problem before this many evaluations "
                  "(unless its space is exhausted)")
    return {op: _experiment_text(spec, op, roles, dtype, budget, output, executor, objective)
            for op, roles in shapes.items()}


def run_name(spec: ModelSpec, operator: str) -> str:
    """The experiment's name, and so its run directory's under the output folder: `<model>_<operator stem>`."""
    return f"{spec.name}_{operator_file_stem(operator)}"


def _experiment_text(spec: ModelSpec, operator: str, roles: dict[tuple[int, ...], list[str]], dtype: str,
                     budget: list[str], output: str, executor: str, objective: str) -> str:
    name = run_name(spec, operator)
    lines = [f"# {operator} problems of {spec.name}, written by `evo zoo`: every shape the model's forward pass",
             "# runs this operator on, for the token counts asked for (a shape shared by several roles once).",
             f"name: {json.dumps(name)}",
             f"operator: {json.dumps(operator)}",
             "problems:",
             "  shapes:"]
    lines += [f"    - {'x'.join(map(str, sizes))}   # {', '.join(who)}" for sizes, who in roles.items()]
    lines += [f"  dtypes: [{dtype}]",
              "budget:", *budget,
              "evaluation:",
              f"  objective: {objective}   # the clock kernels are ranked by (both are recorded)",
              "seed: 0",
              "executor:",
              f"  kind: {executor}",
              f"output: {json.dumps(output)}   # run directory: <output>/<name>",
              ""]
    return "\n".join(lines)
