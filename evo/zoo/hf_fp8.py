"""A Hugging Face model with FP8 weights, and its patch onto an FP8 zoo's kernels (`evo zoo MODEL --dtype fp8`).

    from evo.zoo.hf_fp8 import quantize_model_fp8
    quantize_model_fp8(model)          # every decoder layer's projections: e4m3 weights, a scale per output channel
    patch_model(model, "runs/zoo/llama-3-8b-fp8/llama-3-8b-fp8_kernels.py")   # evo.api: the zoo's fp8_* roles

`quantize_model_fp8` is how a serving stack loads an FP8-dynamic checkpoint, done here from the model's own weights
(no download): each decoder layer's q/k/v/o and gate/up/down nn.Linear (Phi-3's fused qkv_proj and gate_up_proj
too) becomes an evo.zoo.fp8_linear.FP8Linear (weight e4m3 [out, in], weight_scale [out] fp32, the bias kept; each
call quantizes its input per token, then torch._scaled_mm where this torch and device run it, else dequantize +
matmul). Embeddings, norms and lm_head keep their dtype, as FP8 checkpoints do. The model still runs transformers'
own forward, every projection through FP8Linear.

Patched (evo.zoo.hf_patch calls `bind` and `patch_layer` for such a model), each layer's forward runs the zoo's
fp8_gemm+channel ops where the zoo measured the call's token count, dtype and this model's sizes: fp8_qkv on q, k
and v merged, fp8_o_proj, fp8_gate_up on gate and up merged (SwiGLU after it in torch), fp8_down, each
op(x_q, W_q, x_scale, w_scale, dtype) on its input quantized per token in torch; the residual adds and biases in
torch. Merging per-channel-quantized weights is exact (a row keeps its own scale), so the merged weights and scales
are copied once into non-persistent buffers (`evo_fp8_qkv`, `..._scale`; the report counts their bytes). Any other
call runs the layer's FP8Linear modules; norms, attention and lm_head are bound by hf_patch as in a bf16 model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from evo.zoo.fp8_linear import FP8Linear, pick_torch_way, quantize_tokens
from evo.zoo.fp8_problems import FP8_OPERATOR, FP8_ROLES
from evo.zoo.hf_forward import attend, attribute_at
from evo.zoo.hf_roles import DTYPE_NAMES, Bound, pick, tokens_to_run

__all__ = ["quantize_model_fp8", "is_fp8", "bind", "patch_layer", "fp8_decoder_forward", "FP8LayerRoles", "FP8_ROLES"]

_PROJECTIONS = {"self_attn": ("q_proj", "k_proj", "v_proj", "qkv_proj", "o_proj"),
                "mlp": ("gate_proj", "up_proj", "gate_up_proj", "down_proj")}
_PARTS = {"qkv": ("self_attn", ("q_proj", "k_proj", "v_proj"), "qkv_proj"), "o_proj": ("self_attn", ("o_proj",), ""),
          "gate_up": ("mlp", ("gate_proj", "up_proj"), "gate_up_proj"), "down": ("mlp", ("down_proj",), "")}


def _layers(model: nn.Module) -> nn.ModuleList:
    inner = getattr(model, "model", None)
    layers = getattr(inner if isinstance(inner, nn.Module) else model, "layers", None)
    if not isinstance(layers, nn.ModuleList) or not len(layers):
        raise ValueError(f"{type(model).__name__} has no decoder layers (model.layers) to quantize")
    return layers


def quantize_model_fp8(model: nn.Module) -> int:
    """`model`'s decoder-layer projections quantized to FP8 in place (see the module docstring); returns how many
    nn.Linear modules became FP8Linear. ValueError in one line for a model with no decoder layers, a Gemma-2 model
    (its layers keep their own forward) or one already quantized."""
    kind = getattr(getattr(model, "config", None), "model_type", None)
    if kind == "gemma2":
        raise ValueError("quantize_model_fp8: the FP8 plan serves Llama-style layers (Llama, Qwen2, Qwen3, Mistral, "
                         "Phi-3); a Gemma-2 model's four norms and capped logits are not in it")
    layers = _layers(model)
    if is_fp8(model):
        raise ValueError(f"quantize_model_fp8: {type(model).__name__}'s projections are FP8 already")
    param = next(model.parameters())
    way, _ = pick_torch_way(param.device, param.dtype)
    count = 0
    for layer in layers:
        for parent, names in _PROJECTIONS.items():
            module = getattr(layer, parent)
            for name in names:
                linear = getattr(module, name, None)
                if isinstance(linear, nn.Linear):
                    setattr(module, name, FP8Linear.from_linear(linear, way))
                    count += 1
    return count


def is_fp8(model: nn.Module) -> bool:
    """Whether the model's first decoder layer has FP8 projections (quantize_model_fp8's)."""
    layer = _layers(model)[0]
    return any(isinstance(m, FP8Linear) for m in layer.modules())


def _dims(layer: nn.Module) -> dict[str, tuple[int, int]]:
    """Zoo role -> (N, K) of its merged FP8 weight."""
    out = {}
    for role, (parent, names, fused) in _PARTS.items():
        module = getattr(layer, parent)
        linears = [getattr(module, fused)] if fused and hasattr(module, fused) else [getattr(module, n) for n in names]
        out[f"fp8_{role}"] = (sum(m.out_features for m in linears), linears[0].in_features)
    return out


def bind(model: nn.Module, ops: Mapping[str, Callable[..., Any]], dtype: torch.dtype, torch_at: dict[str, Any]
         ) -> tuple[dict[str, tuple[Bound, ...]], dict[str, str]]:
    """The zoo's fp8_* ops that serve this FP8 model (role -> ops) and zoo role -> why torch keeps it (the model's
    FP8Linear modules run it); `torch_at` gets role -> the token counts where its zoo runs its baseline."""
    dims = _dims(_layers(model)[0])
    name = DTYPE_NAMES.get(dtype, str(dtype))
    bound: dict[str, tuple[Bound, ...]] = {}
    kept: dict[str, str] = {}
    for key in [k for k in ops if k in FP8_ROLES]:
        op = ops[key]
        if not callable(op):
            raise ValueError(f"the op for role {key!r} is not callable: {op!r}")
        operator = getattr(op, "operator", None) or FP8_OPERATOR
        if key not in dims:
            kept[key] = "this model's MLP is gated (fp8_gate_up)"
            continue
        if operator != FP8_OPERATOR:
            kept[key] = f"its operator {operator} cannot serve it (per-channel scales: {FP8_OPERATOR})"
            continue
        tokens, why, baseline = tokens_to_run(op, key, dims[key], name)
        if baseline:
            torch_at[key] = baseline
        if tokens is not None and not tokens:
            kept[key] = why
            continue
        bound[key] = (Bound(key, op, operator, dtype, tokens, None, key),)
    for key in dims:
        if key not in bound and key not in kept:
            kept[key] = "no kernel in the zoo (the model's FP8 linears run it)"
    return bound, kept


@dataclass(frozen=True)
class FP8LayerRoles:
    """A patched FP8 layer's ops per zoo role, where each role's merged e4m3 weight, scales and bias live (attribute
    paths on the layer), and the family's pieces (as evo.zoo.hf_forward.LayerRoles)."""

    ops: dict[str, tuple[Bound, ...]]
    weights: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...] | None]]  # weight, scale, bias
    split: tuple[int, int, int]
    rope: Callable[..., Any]
    eager_attention: Callable[..., Any]
    sliding_window: int | None


def _merged(layer: nn.Module, role: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...] | None], int]:
    """The role's weight, scale and bias paths: the FP8Linear's own where it is one module, else buffers of the parts
    concatenated (once); and the bytes copied."""
    parent, names, fused = _PARTS[role]
    module = getattr(layer, parent)
    if fused and hasattr(module, fused):
        names = (fused,)
    if len(names) == 1:
        path = (parent, names[0])
        bias = getattr(module, names[0]).bias
        return ((*path, "weight"), (*path, "weight_scale"), None if bias is None else (*path, "bias")), 0
    parts = [getattr(module, n) for n in names]
    with torch.no_grad():
        w = torch.cat([p.weight.detach() for p in parts]).contiguous()
        s = torch.cat([p.weight_scale.detach() for p in parts]).contiguous()
        layer.register_buffer(f"evo_fp8_{role}", w, persistent=False)
        layer.register_buffer(f"evo_fp8_{role}_scale", s, persistent=False)
        bias = None
        given = [p.bias for p in parts if p.bias is not None]
        if given:  # a part without a bias adds zeros
            b = torch.cat([p.bias.detach() if p.bias is not None else given[0].new_zeros(p.out_features)
                           for p in parts])
            layer.register_buffer(f"evo_fp8_{role}_bias", b, persistent=False)
            bias = (f"evo_fp8_{role}_bias",)
    copied = sum(getattr(layer, n).numel() * getattr(layer, n).element_size() for n in layer._buffers
                 if n.startswith(f"evo_fp8_{role}"))
    return ((f"evo_fp8_{role}",), (f"evo_fp8_{role}_scale",), bias), copied


def patch_layer(layer: nn.Module, bound: dict[str, tuple[Bound, ...]]) -> int:
    """Install the FP8 forward on a layer evo.zoo.hf_patch patched (its LayerRoles gives the family's pieces) and
    the merged weights its bound roles need; returns the bytes copied."""
    import types

    base = layer._evo_roles
    weights, copied = {}, 0
    for key in bound:
        weights[key], n = _merged(layer, key.removeprefix("fp8_"))
        copied += n
    layer._evo_roles = FP8LayerRoles(dict(bound), weights, base.split, base.rope, base.eager_attention,
                                     base.sliding_window)
    layer.forward = types.MethodType(fp8_decoder_forward, layer)
    return copied


def _project(layer: nn.Module, r: FP8LayerRoles, key: str, x: torch.Tensor) -> torch.Tensor | None:
    """x through the zoo's op of `key` where it serves these rows (its bias added in torch), else None."""
    b = pick(r.ops.get(key, ()), x.shape[0], x.dtype)
    if b is None:
        return None
    weight, scale, bias = r.weights[key]
    x_q, x_scale = quantize_tokens(x)
    y = b.op(x_q, attribute_at(layer, weight), x_scale, attribute_at(layer, scale), x.dtype)
    return y if bias is None else y + attribute_at(layer, bias)


def fp8_decoder_forward(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                        position_ids: torch.Tensor | None = None, cache: Any = None, use_cache: bool | None = False,
                        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                        **kwargs: Any) -> torch.Tensor:
    """A Llama-like decoder layer's forward with FP8 projections (transformers 5's signature; see the module
    docstring): the zoo's fp8 ops where they serve, else the layer's FP8Linear modules."""
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    if self.training:
        return type(self).forward(self, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    r: FP8LayerRoles = self._evo_roles
    attn, mlp = self.self_attn, self.mlp
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    xn = self.input_layernorm(x)
    qkv = _project(self, r, "fp8_qkv", xn)
    if qkv is not None:
        q, k, v = qkv.split(r.split, dim=-1)
    elif hasattr(attn, "qkv_proj"):
        q, k, v = attn.qkv_proj(xn).split(r.split, dim=-1)
    else:
        q, k, v = attn.q_proj(xn), attn.k_proj(xn), attn.v_proj(xn)
    a = attend(self, r, q, k, v, shape, attention_mask, position_ids, cache, use_cache, position_embeddings, kwargs)
    o = _project(self, r, "fp8_o_proj", a)
    h = x + (attn.o_proj(a) if o is None else o)
    hn = self.post_attention_layernorm(h)
    gate_up = _project(self, r, "fp8_gate_up", hn)
    if gate_up is None and hasattr(mlp, "gate_up_proj"):
        gate_up = mlp.gate_up_proj(hn)
    if gate_up is not None:
        gate, up = gate_up.chunk(2, dim=-1)
        hidden = up * (mlp.activation_fn(gate) if hasattr(mlp, "activation_fn") else mlp.act_fn(gate))
    else:
        hidden = mlp.act_fn(mlp.gate_proj(hn)) * mlp.up_proj(hn)
    d = _project(self, r, "fp8_down", hidden)
    return (h + (mlp.down_proj(hidden) if d is None else d)).view(shape)
