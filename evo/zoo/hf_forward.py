"""The forwards a patched Hugging Face model runs (evo.zoo.hf_patch installs them on module instances; the classes
are never touched): a Llama-like decoder layer's, an RMSNorm's and the lm_head's.

A decoder layer (Llama, Qwen2, Qwen3, Mistral, Phi-3) runs, on its tokens flattened to [T, hidden]:

    x -> input norm -> qkv (one GEMM: q, k and v merged) -> (Qwen3: q and k normed per head) -> RoPE, cache update,
      attention (the attention interface)
      -> o_proj + x = h -> post-attention norm -> gate_up (SwiGLU: silu(gate) * up) -> down + h

each GEMM role through its zoo op where the op serves T tokens in this dtype (evo.zoo.hf_roles.Bound), else through
the model's own nn.Linear modules exactly as transformers runs them. The residual adds are in the zoo's o_proj and
down ops (gemm+residual), which is why the whole layer's forward is replaced, not only its attention and MLP. RoPE
and the cache update are transformers' own code (the family's `apply_rotary_pos_emb`, `cache.update`); attention
goes through `ALL_ATTENTION_FUNCTIONS` under the model's attn_implementation (evo.zoo.hf_attention). In training
mode the class's own forward runs (evo's kernels have no backward).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from evo.zoo.hf_roles import Bound, pick

__all__ = ["LayerRoles", "decoder_forward", "norm_forward", "lm_head_forward"]


@dataclass(frozen=True)
class LayerRoles:
    """What a patched decoder layer needs besides its own modules: each GEMM role's ops (none: torch runs it),
    where each op's weight and bias live on the layer (attribute paths), and the family's pieces."""

    qkv: tuple[Bound, ...]
    o_proj: tuple[Bound, ...]
    gate_up: tuple[Bound, ...]
    down: tuple[Bound, ...]
    weights: dict[str, tuple[str, ...]]  # "role:kn" or "role:nk" -> attribute path of that form's weight
    biases: dict[str, tuple[str, ...]]  # role -> attribute path of a bias the model adds (op's operand or after it)
    split: tuple[int, int, int]  # the widths of q, k and v in the merged projection
    merged_qkv: bool  # the model's own fused qkv_proj (Phi-3)
    merged_gate_up: bool  # the model's own fused gate_up_proj (Phi-3)
    rope: Callable[..., Any]  # the family's apply_rotary_pos_emb
    eager_attention: Callable[..., Any]  # the family's eager_attention_forward (the interface's default)
    sliding_window: int | None  # what the family passes the attention interface (Llama: nothing; None)


def attribute_at(obj: Any, path: tuple[str, ...]) -> Any:
    """The attribute `path` names below `obj` (("mlp", "down_proj", "weight") is obj.mlp.down_proj.weight)."""
    for name in path:
        obj = getattr(obj, name)
    return obj


def _gemm(layer: nn.Module, r: LayerRoles, b: Bound, x: torch.Tensor, norm: nn.Module | None = None,
          residual: torch.Tensor | None = None) -> torch.Tensor:
    """One GEMM role through its op: the bias where the op takes it, else added after it (a bias the op lacks)."""
    form = b.form
    bias = attribute_at(layer, r.biases[b.role]) if b.role in r.biases else None
    y = b.op(*form.args(x, attribute_at(layer, r.weights[f"{b.role}:{form.weight}"]), bias, norm, residual))
    return y if bias is None or form.bias else y + bias


def _qkv(layer: nn.Module, r: LayerRoles, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    attn, norm, b = layer.self_attn, layer.input_layernorm, pick(r.qkv, x.shape[0], x.dtype)
    if b is not None:
        fused = b.form.norm
        return _gemm(layer, r, b, x if fused else norm(x), norm if fused else None).split(r.split, dim=-1)
    xn = norm(x)
    if r.merged_qkv:
        return attn.qkv_proj(xn).split(r.split, dim=-1)
    return attn.q_proj(xn), attn.k_proj(xn), attn.v_proj(xn)


def _mlp_hidden(layer: nn.Module, r: LayerRoles, h: torch.Tensor) -> torch.Tensor:
    mlp, norm, b = layer.mlp, layer.post_attention_layernorm, pick(r.gate_up, h.shape[0], h.dtype)
    if b is not None:
        fused = b.form.norm
        return _gemm(layer, r, b, h if fused else norm(h), norm if fused else None)
    hn = norm(h)
    if r.merged_gate_up:  # Phi3MLP's own arithmetic
        gate, up = mlp.gate_up_proj(hn).chunk(2, dim=-1)
        return up * mlp.activation_fn(gate)
    return mlp.act_fn(mlp.gate_proj(hn)) * mlp.up_proj(hn)  # LlamaMLP's


def _residual_gemm(layer: nn.Module, r: LayerRoles, bounds: tuple[Bound, ...], linear: nn.Module, x: torch.Tensor,
                   residual: torch.Tensor) -> torch.Tensor:
    b = pick(bounds, x.shape[0], x.dtype)
    if b is not None:
        return _gemm(layer, r, b, x, residual=residual)
    return residual + linear(x)


def attend(layer: nn.Module, r: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: torch.Size,
           attention_mask: torch.Tensor | None, position_ids: torch.Tensor | None, cache: Any, use_cache: bool | None,
           position_embeddings: tuple[torch.Tensor, torch.Tensor], kwargs: dict[str, Any]) -> torch.Tensor:
    """The attention between a layer's projections as transformers runs it: q, k, v ([tokens, heads * head_dim]) split
    into heads (Qwen3's q and k normed per head), rotated (r.rope), K and V written into the cache, then the model's
    attention interface (r's eager one by default); returns the output as rows [tokens, heads * head_dim]. `r` holds
    rope, eager_attention and sliding_window (LayerRoles, FP8LayerRoles)."""
    attn = layer.self_attn
    heads = (*shape[:-1], -1, attn.head_dim)
    q, k, v = (t.reshape(heads).transpose(1, 2) for t in (q, k, v))
    if hasattr(attn, "q_norm"):  # Qwen3: an RMSNorm over each head's q and k before RoPE (its module's own)
        q, k = attn.q_norm(q), attn.k_norm(k)
    cos, sin = position_embeddings
    q, k = r.rope(q, k, cos, sin)
    # what the attention module's **kwargs would hold: the layer's own, position_ids and use_cache
    kw = {"position_ids": position_ids, "use_cache": use_cache, **kwargs}
    if cache is not None:
        k, v = cache.update(k, v, attn.layer_idx, kwargs=kw)
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    interface = ALL_ATTENTION_FUNCTIONS.get_interface(attn.config._attn_implementation, r.eager_attention)
    out, _ = interface(attn, q, k, v, attention_mask, dropout=0.0, scaling=attn.scaling,
                       sliding_window=r.sliding_window, **kw)
    return out.reshape(q.shape[0] * q.shape[2], -1)


def decoder_forward(self: nn.Module, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                    position_ids: torch.Tensor | None = None, cache: Any = None, use_cache: bool | None = False,
                    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                    **kwargs: Any) -> torch.Tensor:
    """A decoder layer's forward with the signature transformers 5 calls it with (`past_key_values` is taken as
    `cache`, its older name)."""
    if cache is None:
        cache = kwargs.pop("past_key_values", None)
    if self.training:
        return type(self).forward(self, hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                                  cache=cache, use_cache=use_cache, position_embeddings=position_embeddings, **kwargs)
    r: LayerRoles = self._evo_roles
    attn = self.self_attn
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    q, k, v = _qkv(self, r, x)
    a = attend(self, r, q, k, v, shape, attention_mask, position_ids, cache, use_cache, position_embeddings, kwargs)
    h = _residual_gemm(self, r, r.o_proj, attn.o_proj, a, x)
    y = _residual_gemm(self, r, r.down, self.mlp.down_proj, _mlp_hidden(self, r, h), h)
    return y.view(shape)


def norm_forward(self: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """An RMSNorm (weight, variance_epsilon) through the zoo's norm op where it serves these rows."""
    rows = hidden_states.numel() // hidden_states.shape[-1]
    b = pick(self._evo_norm, rows, hidden_states.dtype)
    if b is not None:
        x = hidden_states.reshape(rows, hidden_states.shape[-1])
        return b.op(x, self.weight, float(self.variance_epsilon)).view(hidden_states.shape)
    return type(self).forward(self, hidden_states)


def lm_head_forward(self: nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """The lm_head (an nn.Linear) through the zoo's op where it serves these rows."""
    rows = hidden_states.numel() // hidden_states.shape[-1]
    b = pick(self._evo_lm_head, rows, hidden_states.dtype)
    if b is not None:
        x = hidden_states.reshape(rows, hidden_states.shape[-1])
        weight = self.evo_weight if b.form.weight == "kn" else self.weight
        y = b.op(*b.form.args(x, weight))
        y = y if self.bias is None else y + self.bias
        return y.view(*hidden_states.shape[:-1], y.shape[-1])
    return type(self).forward(self, hidden_states)
