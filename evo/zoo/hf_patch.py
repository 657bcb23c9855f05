"""Patch a Hugging Face `transformers` model (Llama, Qwen2, Qwen3, Mistral, Phi-3; Gemma 2's attention) to run a
zoo's kernels, and unpatch it.

    from evo.api import patch_model, unpatch_model
    report = patch_model(model, "runs/zoo/llama-3-8b/llama-3-8b_kernels.py")   # prints one line: what runs where
    model.generate(...)                                                        # eager, or compiled with a static cache
    unpatch_model(model)                                                       # the model as it was, bit for bit

(`evo.api.patch_model` loads the zoo module; `patch_model` here takes its ops, role -> callable.) What changes, on
the model's module INSTANCES only (no class is touched, so other models are unaffected):

- every decoder layer's `forward` (evo.zoo.hf_forward.decoder_forward): q, k and v as ONE GEMM (the zoo's qkv
  role, merged weights); o_proj and down with the residual add in the GEMM's epilogue (gemm+residual, which is why
  the whole layer's forward is replaced); gate_up as one GEMM with SwiGLU (gemm+swiglu, B = [gate | up]);
- the RMSNorms' `forward` (the two of each layer and the final one) and the lm_head's; Qwen3's per-head q and k
  norms (`q_norm`, `k_norm`, between the projections and RoPE) stay transformers' own, called by that forward;
- the attention implementation: `evo` (evo.zoo.hf_attention), which calls the zoo's attention op where
  transformers needs no mask, else SDPA;
- weights: the zoo's gemm operators take B = W^T, [K, N] row-major, so each patched GEMM's weight is copied ONCE
  here, transposed (and q/k/v, gate/up concatenated), into a non-persistent buffer `evo_<role>` of its layer (not in
  the state dict; it moves with `.to()`): no call transposes or copies a weight, at the cost of a second copy of the
  patched weights (the report line says how much). An op of the `linear` operators reads nn.Linear's [N, K] weight
  in place (only q/k/v and gate/up of models that keep them apart are concatenated). Patch after the weights are
  final: a copy does not follow later changes (patch again to refresh it).

A call runs the zoo's op only where the zoo measured its token count, dtype and this model's sizes
(evo.zoo.hf_roles) and its module's USES says evo runs there (evo.zoo.uses: where the zoo's baseline runs, the
layer's own torch code runs instead, which torch.compile can fuse); any other call runs transformers' own code, so a
zoo of decode token counts leaves prefill to torch. A role may have several ops: `evo zoo`'s decode plan names
`linear_qkv` (linear+rmsnorm: the input norm in the GEMM's prologue), `linear_o_proj`, `linear_gate_up`,
`linear_down` for T <= 16 beside the gemm roles of larger T; the first op that serves a call runs it. A role the zoo
has no kernel for, or none for this model, keeps torch's code, and the report's one line names it and why: the
sampling softmax (transformers samples in its own code), `rope` (transformers' own RoPE and cache update),
`linear_lm_head` (its fused norm is the final norm, which transformers runs over every row before lm_head takes the
last one).

A model whose projections are FP8 (evo.zoo.hf_fp8.quantize_model_fp8: e4m3 weights with per-channel scales) runs an
FP8 zoo's fp8_* roles (fp8_gemm+channel on each input quantized per token) through evo.zoo.hf_fp8's layer forward;
its norms, attention and lm_head are bound here as in any model, and a bf16 zoo's GEMM roles are kept, with why.

Gemma 2 (ATTENTION_ONLY): its layers keep transformers' forward (four norms with (1 + weight), GeGLU, the residual
adds after the post norms: evo's decoder forward is Llama's), and only its attention runs the zoo's
`attention+causal+softcap<cap>` ops (and `...+window<W>` on its sliding layers; `cache_attention+softcap<cap>` for the
decode steps over a static cache, whose mask it takes) through the attention interface (evo.zoo.hf_attention), every
other call the family's eager attention; the report names the roles torch keeps.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from evo.zoo import hf_attention, hf_fp8
from evo.zoo.hf_forward import LayerRoles, decoder_forward, lm_head_forward, norm_forward
from evo.zoo.hf_roles import (
    DEFAULT_OPERATORS,
    DTYPE_NAMES,
    ROLE_OPERATORS,
    Bound,
    OpForm,
    op_form,
    tokens_to_run,
)
from evo.zoo.uses import base_role

__all__ = ["patch_model", "unpatch_model", "PatchReport", "FAMILIES"]

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3", "gemma2")
ATTENTION_ONLY = ("gemma2",)  # families whose layers keep their own forward: only attention is routed
_GEMMS = ("qkv", "o_proj", "gate_up", "down")
_NOT_ROUTED = {"sampling_softmax": "transformers samples in its own code",
               "up": "a GELU MLP's role; these families gate theirs (gate_up)",
               "rope": "transformers' own RoPE and cache update: its caches are not rope_cache's",
               **{r: "the model's projections are not FP8 (evo.zoo.hf_fp8.quantize_model_fp8 makes them so)"
                  for r in hf_fp8.FP8_ROLES}}


@dataclass(frozen=True)
class PatchReport:
    """What a patch did: role -> (operator, token counts it serves, None: every count) for the roles on evo's
    kernels, role -> why for those torch keeps, and the bytes of weights copied at patch time."""

    model: str
    layers: int
    dtype: str
    served: dict[str, tuple[str, tuple[int, ...] | None]] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    copied_bytes: int = 0
    torch_at: dict[str, tuple[int, ...]] = field(default_factory=dict)  # role -> T its zoo's baseline runs: torch

    def line(self) -> str:
        """The one line a patch prints."""
        groups: dict[tuple[int, ...] | None, list[str]] = {}
        for role, (_, tokens) in self.served.items():
            groups.setdefault(tokens, []).append(role)
        on = "; ".join(f"{', '.join(roles)} at " + ("every T" if t is None else "T=" + ",".join(map(str, t)))
                       for t, roles in groups.items()) or "no role"
        layers = f"{self.layers} layer{'' if self.layers == 1 else 's'}"
        text = f"evo patch: {self.model} ({layers}, {self.dtype}): evo's kernels for {on}"
        text += " (other token counts run torch)" if any(t is not None for t in groups) else ""
        if self.torch_at:
            text += "; torch's code where the zoo runs its baseline: " + "; ".join(
                f"{role} at T={','.join(map(str, t))}" for role, t in self.torch_at.items())
        if self.kept:
            text += "; torch keeps " + "; ".join(f"{role} ({why})" for role, why in self.kept.items())
        if self.copied_bytes:
            text += f"; {self.copied_bytes / 2**20:.1f} MiB of weights copied once (transposed/merged for the GEMMs)"
        return text


def _base(model: nn.Module) -> nn.Module:
    """The decoder stack (`model.model` of a *ForCausalLM, or the model itself)."""
    inner = getattr(model, "model", None)
    return inner if isinstance(inner, nn.Module) and hasattr(inner, "layers") else model


def _check_model(model: Any) -> str:
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if not isinstance(model, nn.Module) or kind is None:
        raise ValueError(f"patch_model takes a transformers model; got {type(model).__name__}")
    if kind not in FAMILIES:
        whole = ", ".join(f for f in FAMILIES if f not in ATTENTION_ONLY)
        raise ValueError(f"patch_model serves the {whole} families and the attention of "
                         f"{', '.join(ATTENTION_ONLY)}; {type(model).__name__} is {kind!r}")
    layers = getattr(_base(model), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"{type(model).__name__} has no decoder layers (model.layers) to patch")
    return kind


def _dims(model: nn.Module, fp8: bool = False) -> dict[str, tuple[int, ...]]:
    """Role -> the sizes its measured problems must have besides the token count (see served_tokens); an FP8 model's
    projections are not among them (evo.zoo.hf_fp8 binds its fp8_* roles)."""
    layer = _base(model).layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    heads, kv_heads = model.config.num_attention_heads, model.config.num_key_value_heads
    q, kv, d = heads * attn.head_dim, kv_heads * attn.head_dim, attn.head_dim
    if model.config.model_type in ATTENTION_ONLY:
        return {"attention": (heads, kv_heads, d)}
    hidden, inter = mlp.down_proj.out_features, mlp.down_proj.in_features
    dims = {"norm": (hidden,), "attention": (heads, kv_heads, d)}
    if not fp8:
        dims.update(qkv=(q + 2 * kv, hidden), o_proj=(hidden, q), gate_up=(inter, hidden), down=(hidden, inter))
    head = getattr(model, "lm_head", None)
    if isinstance(head, nn.Linear):
        dims["lm_head"] = (head.out_features, head.in_features)
    return dims


def _bind(model: nn.Module, ops: Mapping[str, Callable[..., Any]], dtype: torch.dtype, torch_at: dict[str, Any],
          fp8: bool = False) -> tuple[dict[str, tuple[Bound, ...]], dict[str, str]]:
    """Role -> the ops that can serve it in this model (a zoo's `linear_qkv` serves qkv, as `qkv` does), and zoo
    role name -> why torch keeps it; `torch_at` gets zoo role name -> the token counts its baseline runs (torch's
    code runs them)."""
    dims, layer = _dims(model, fp8), _base(model).layers[0]
    kept: dict[str, str] = {}
    bound: dict[str, list[Bound]] = {}
    for key, op in ops.items():
        if not callable(op):
            raise ValueError(f"the op for role {key!r} is not callable: {op!r}")
        role = base_role(key)
        if fp8 and key in hf_fp8.FP8_ROLES:  # evo.zoo.hf_fp8.bind's
            continue
        if fp8 and role in _GEMMS:
            kept[key] = "the model's projections are FP8 (an FP8 zoo's fp8_* roles serve them)"
            continue
        if role not in dims:
            kept[key] = _NOT_ROUTED.get(key, "not a role of this model") if model.config.model_type not in \
                ATTENTION_ONLY else f"{model.config.model_type}'s layers keep their own forward (attention only)"
            continue
        operator = getattr(op, "operator", None) or DEFAULT_OPERATORS[role]
        # attention's model variants (a logit cap, a window: Gemma 2's) serve the calls that pass the same
        variant = role == "attention" and operator.startswith(("attention+causal+", "cache_attention+"))
        if operator not in ROLE_OPERATORS[role] and not variant:
            kept[key] = f"its operator {operator} cannot serve it"
            continue
        if role == "gate_up" and _gate_up_bias(layer.mlp):
            kept[key] = f"{operator} takes no bias; this MLP's gate and up have one"
            continue
        form = op_form(operator) if role in (*_GEMMS, "lm_head") else None
        if role == "lm_head" and form.norm:
            kept[key] = ("its prologue norm is the final norm, which transformers runs over every row before "
                         "lm_head takes the last")
            continue
        name = DTYPE_NAMES.get(dtype, str(dtype))
        tokens, why, baseline = tokens_to_run(op, role, dims[role], name)
        if baseline:
            torch_at[key] = baseline
        if tokens is not None and not tokens:
            kept[key] = why
            continue
        bound.setdefault(role, []).append(Bound(role, op, operator, dtype, tokens, form, key))
    for role in dims:
        if role not in bound and not any(base_role(k) == role for k in kept):
            kept[role] = "no kernel in the zoo"
    return {role: tuple(b) for role, b in bound.items()}, kept


def _gate_up_bias(mlp: nn.Module) -> bool:
    names = ("gate_proj", "up_proj", "gate_up_proj")
    return any(getattr(getattr(mlp, n, None), "bias", None) is not None for n in names)


def _parts(layer: nn.Module, role: str) -> tuple[str, list[str]]:
    """The model's nn.Linear modules a role's GEMM merges, in the zoo's order (q, k, v; gate, up): their parent
    module's name on the layer and theirs."""
    attn, mlp = layer.self_attn, layer.mlp
    if role == "qkv":
        return "self_attn", ["qkv_proj"] if hasattr(attn, "qkv_proj") else ["q_proj", "k_proj", "v_proj"]
    if role == "gate_up":
        return "mlp", ["gate_up_proj"] if hasattr(mlp, "gate_up_proj") else ["gate_proj", "up_proj"]
    return ("self_attn", ["o_proj"]) if role == "o_proj" else ("mlp", ["down_proj"])


def _weight(layer: nn.Module, role: str, form: OpForm) -> tuple[tuple[str, ...], int]:
    """Where the op's weight lives: the model's own weight read in place, or a buffer made once: `evo_<role>`
    (W^T, [K, N]: gemm) or `evo_<role>_nk` (merged nn.Linear weights, [N, K]: linear)."""
    parent, names = _parts(layer, role)
    if form.weight == "nk" and len(names) == 1:
        return (parent, names[0], "weight"), 0
    linears = [getattr(getattr(layer, parent), n) for n in names]
    with torch.no_grad():
        w = torch.cat([m.weight.detach() for m in linears], dim=0)
        w = w.t().contiguous() if form.weight == "kn" else w.contiguous()
    name = f"evo_{role}" if form.weight == "kn" else f"evo_{role}_nk"
    layer.register_buffer(name, w, persistent=False)
    return (name,), w.numel() * w.element_size()


def _bias(layer: nn.Module, role: str) -> tuple[str, ...] | None:
    """Where the role's bias lives (None: it has none): the model's own, or a buffer of q, k and v's merged."""
    parent, names = _parts(layer, role)
    linears = [getattr(getattr(layer, parent), n) for n in names]
    if all(m.bias is None for m in linears):
        return None
    if len(names) == 1:
        return (parent, names[0], "bias")
    with torch.no_grad():
        b = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.out_features)
                       for m in linears])
    layer.register_buffer(f"evo_{role}_bias", b, persistent=False)
    return (f"evo_{role}_bias",)


def _patch_layer(layer: nn.Module, bound: dict[str, tuple[Bound, ...]]) -> int:
    """Install the layer's forward and its weight buffers; returns the bytes copied."""
    attn, mlp = layer.self_attn, layer.mlp
    if attn.config.model_type in ATTENTION_ONLY:  # the layer's own forward: its attention interface calls evo's
        if "attention" in bound:
            attn._evo_attention = bound["attention"]
        return 0
    family = sys.modules[type(attn).__module__]
    weights, biases, copied = {}, {}, 0
    for role in _GEMMS:
        for b in bound.get(role, ()):
            where = f"{role}:{b.form.weight}"
            if where not in weights:
                weights[where], n = _weight(layer, role, b.form)
                copied += n
        bias = _bias(layer, role) if role in bound else None
        if bias is not None:
            biases[role] = bias
    q, kv = attn.config.num_attention_heads * attn.head_dim, attn.config.num_key_value_heads * attn.head_dim
    # Qwen2 passes its layer's window, Mistral and Phi-3 the config's; Llama none (None: SDPA ignores it)
    window = getattr(attn, "sliding_window", getattr(attn.config, "sliding_window", None))
    layer._evo_roles = LayerRoles(
        qkv=bound.get("qkv", ()), o_proj=bound.get("o_proj", ()), gate_up=bound.get("gate_up", ()),
        down=bound.get("down", ()),
        weights=weights, biases=biases, split=(q, kv, kv), merged_qkv=hasattr(attn, "qkv_proj"),
        merged_gate_up=hasattr(mlp, "gate_up_proj"), rope=family.apply_rotary_pos_emb,
        eager_attention=family.eager_attention_forward, sliding_window=window)
    layer.forward = types.MethodType(decoder_forward, layer)
    if "attention" in bound:
        attn._evo_attention = bound["attention"]
    return copied


def patch_model(model: nn.Module, ops: Mapping[str, Callable[..., Any]], quiet: bool = False) -> PatchReport:
    """`model` patched in place to run `ops` (role -> op: `evo.api.load_zoo`'s, or callables taking the zoo's
    operands) where they serve (see the module docstring); an earlier patch is undone first. Prints the report's
    line to stderr unless `quiet`. ValueError, before anything changes, for a model of another family or an op that
    is not callable."""
    _check_model(model)
    if not isinstance(ops, Mapping):
        raise ValueError(f"ops must map roles to callables; got {type(ops).__name__}")
    param = next(model.parameters())
    torch_at: dict[str, tuple[int, ...]] = {}
    fp8 = model.config.model_type not in ATTENTION_ONLY and hf_fp8.is_fp8(model)
    bound, kept = _bind(model, ops, param.dtype, torch_at, fp8)
    fp8_bound, fp8_kept = hf_fp8.bind(model, ops, param.dtype, torch_at) if fp8 else ({}, {})
    kept.update(fp8_kept)
    unpatch_model(model)
    hf_attention.register()
    base = _base(model)
    copied = 0
    for layer in base.layers:
        copied += _patch_layer(layer, bound)
        copied += hf_fp8.patch_layer(layer, fp8_bound) if fp8 else 0
    if "norm" in bound:
        norms = [m for layer in base.layers for m in (layer.input_layernorm, layer.post_attention_layernorm)]
        for norm in norms + ([base.norm] if isinstance(getattr(base, "norm", None), nn.Module) else []):
            norm._evo_norm = bound["norm"]
            norm.forward = types.MethodType(norm_forward, norm)
    head = getattr(model, "lm_head", None)
    if "lm_head" in bound:
        head._evo_lm_head = bound["lm_head"]
        if any(b.form.weight == "kn" for b in bound["lm_head"]):
            with torch.no_grad():
                head.register_buffer("evo_weight", head.weight.detach().t().contiguous(), persistent=False)
            copied += head.evo_weight.numel() * head.evo_weight.element_size()
        head.forward = types.MethodType(lm_head_forward, head)
    model._evo_patch = {"attn_implementation": model.config._attn_implementation}
    if "attention" in bound:
        model.set_attn_implementation(hf_attention.NAME)
    _forget_compiled(model)
    report = PatchReport(type(model).__name__, len(base.layers), DTYPE_NAMES.get(param.dtype, str(param.dtype)),
                         {b.key: (b.operator, None if b.tokens is None else tuple(sorted(b.tokens)))
                          for bs in (*bound.values(), *fp8_bound.values()) for b in bs}, kept, copied,
                         {k: t for k, t in torch_at.items() if k not in kept})
    if not quiet:
        print(report.line(), file=sys.stderr)
    return report


def unpatch_model(model: nn.Module) -> nn.Module:
    """`model` itself with every patch undone: forwards, buffers and attn_implementation as they were."""
    state = getattr(model, "_evo_patch", None)
    for module in model.modules():
        for name in ("forward", "_evo_roles", "_evo_norm", "_evo_lm_head", "_evo_attention"):
            if name in module.__dict__:
                delattr(module, name)
        for name in [n for n in module._buffers if n.startswith("evo_")]:
            del module._buffers[name]
    if state is not None:
        if model.config._attn_implementation != state["attn_implementation"]:
            model.set_attn_implementation(state["attn_implementation"])
        del model._evo_patch
        _forget_compiled(model)
    return model


def _forget_compiled(model: nn.Module) -> None:
    """Drop the compiled call generate() keeps on the model (`_compiled_call`): it was traced through the forwards
    as they were, so the next compiled generate traces the model as it is now."""
    for name in ("_compiled_call", "_last_compile_config"):
        if name in model.__dict__:
            delattr(model, name)
