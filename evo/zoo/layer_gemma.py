"""A Gemma-2 decoder layer in plain PyTorch, as transformers' Gemma2DecoderLayer computes it (its eager attention:
SDPA cannot cap logits), built on the reference layer (evo.zoo.layer.DecoderLayer: seeded weights, the KV cache, RoPE):

    x -> input_norm -> qkv -> RoPE -> attention (scores * query_pre_attn_scalar ** -0.5, capped cap * tanh(s / cap),
      causal, on a sliding layer only the last `sliding_window` keys) -> o_proj -> post_attention_norm, + x = h
    h -> pre_feedforward_norm -> gate_up -> GeGLU (gelu_tanh(gate) * up) -> down -> post_feedforward_norm, + h

Torch's attention is transformers' eager path by default (`attention="eager"`: the scores materialised, capped, masked,
softmax in fp32; SDPA cannot cap), or its FlexAttention (`"flex"`: the cap a score_mod, the causal window a block mask
made once per token count in an eager call, flex_attention compiled on a GPU as transformers compiles it), the
stronger torch way where it compiles. Every norm scales by (1 + weight) in fp32 (GemmaRMSNorm); the patched norm
roles get 1 + weight as an fp32 weight (made once here, as the plan's notes say: the same formula). `layer_index`
picks the layer: layer i slides unless (i + 1) is a multiple of the spec's sliding_window_pattern (layer 0, the
default, slides).

Patched roles (evo.zoo.gemma_problems' plan), each where the zoo has it, torch where not:
- linear_qkv (linear+rmsnorm: op(x, W, 1 + w_in, eps)) | post_norm on the input, then qkv (gemm: op(x, B));
- rope (rope_cache), attention (the global layers, or every layer while the window covers every key) |
  attention_local (the sliding layers once context + T passes the window): op(q, k, v, scale);
- linear_o_proj (linear: op(a, W)) | o_proj (gemm: op(a, B)); post_norm (rmsnorm: op(x, 1 + w, eps)) after it and
  after down, their residual adds in torch;
- linear_gate_up (linear+rmsnorm+geglu: op(h, W, 1 + w_pre, eps), the pre-feedforward norm fused) | add_norm
  (rmsnorm+residual: op(post_normed, x, 1 + w_pre, eps) -> (normed, h)), then gate_up: gemm+geglu (op(y, B) -> the
  activation) or a plain gemm ([gate | up], GeGLU in torch): the output's width says which;
- linear_down (linear) | down (gemm).
The plan's cache_attention (a decode step over a static cache) is no role here: a forward pass attends through the
attention roles, and evo.zoo.decode's loop runs Llama-style and MoE layers only.
A layer stack fuses each layer's last residual add into the next layer's add_norm with its input norm; one layer
runs its input norm as the post_norm op (the same shape and operator) and its last add in torch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from evo.zoo.layer import DecoderLayer, RMSNorm
from evo.zoo.model import ModelSpec

__all__ = ["Gemma2DecoderLayer", "GemmaRMSNorm", "ATTENTION"]

NORMS = ("input_norm", "post_attention_norm", "pre_feedforward_norm", "post_feedforward_norm")
ATTENTION = ("eager", "flex")  # transformers' attention implementations the torch layer runs


class GemmaRMSNorm(RMSNorm):
    """y = x * rsqrt(mean(x^2) + eps) * (1 + weight), in fp32, cast back (transformers' Gemma2RMSNorm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight.float())
                ).to(x.dtype)


class Gemma2DecoderLayer(DecoderLayer):
    """One Gemma-2 layer of `spec` (post_norms); DecoderLayer's arguments, `layer_index` (0: a sliding layer) and
    `attention` (torch's way, ATTENTION)."""

    ROLES = ("post_norm", "add_norm", "qkv", "rope", "attention", "attention_local", "o_proj", "gate_up", "down",
             "linear_qkv", "linear_o_proj", "linear_gate_up", "linear_down")

    def __init__(self, spec: ModelSpec, *args: object, layer_index: int = 0, attention: str = "eager",
                 **kwargs: object) -> None:
        if isinstance(layer_index, bool) or not isinstance(layer_index, int) or layer_index < 0:
            raise ValueError(f"layer_index must be an integer >= 0; got {layer_index!r}")
        if attention not in ATTENTION:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION)} (torch's way); got {attention!r}")
        super().__init__(spec, *args, **kwargs)  # type: ignore[arg-type]
        self.torch_attention = attention
        self._block_masks: dict[tuple[int, int], object] = {}
        pattern = spec.sliding_window_pattern
        self.window = spec.sliding_window if pattern == 1 or (layer_index + 1) % pattern else 0
        self.scale = (spec.query_pre_attn_scalar or spec.head_dim) ** -0.5
        for name in NORMS:  # what a patched norm op takes as its weight: 1 + weight in fp32
            self.register_buffer(f"{name}_scale", 1.0 + getattr(self, name).weight.float(), persistent=False)

    def _check_kind(self, spec: ModelSpec) -> None:
        if not spec.post_norms or spec.num_experts or spec.mlp not in ("geglu", "swiglu"):
            raise ValueError(f"{spec.name}: Gemma2DecoderLayer builds a Gemma-2 layer (post_norms, a gated MLP, no "
                             f"experts); got post_norms {spec.post_norms}, mlp {spec.mlp}, {spec.num_experts} experts")

    def _make_mlp(self, spec: ModelSpec, eps: float) -> None:
        h, inter = spec.hidden_size, spec.intermediate_size
        self.input_norm = GemmaRMSNorm(h, eps)  # in the places DecoderLayer made them: the same draws
        self.post_attention_norm = GemmaRMSNorm(h, eps)
        self.pre_feedforward_norm = GemmaRMSNorm(h, eps)
        self.post_feedforward_norm = GemmaRMSNorm(h, eps)
        self.gate_up_proj = nn.Linear(h, 2 * inter, bias=False)  # rows [gate; up]
        self.down_proj = nn.Linear(inter, h, bias=False)

    def mlp_linears(self) -> dict[str, nn.Linear]:
        return {"down": self.down_proj, "gate_up": self.gate_up_proj}

    def layer_roles(self) -> tuple[str, ...]:
        """The roles of this layer (evo.zoo.patch.roles_of): the plan's, attention_local on a sliding layer only."""
        return ("post_norm", "add_norm", "qkv", "o_proj", "gate_up", "down", *(("rope",) if self.context else ()),
                "attention", *(("attention_local",) if self.window else ()), "linear_qkv", "linear_o_proj",
                "linear_gate_up", "linear_down")

    def _gnorm(self, role: str, name: str, x: torch.Tensor) -> torch.Tensor:
        op = self._op(role, x.shape[0])
        return getattr(self, name)(x) if op is None else op(x, getattr(self, f"{name}_scale"), self.input_norm.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.spec.hidden_size:
            raise ValueError(f"expected x of shape [T, {self.spec.hidden_size}]; got {list(x.shape)}")
        t, eps = x.shape[0], self.input_norm.eps
        fused = None if self._torch_at("linear_qkv", t) else self._fused("qkv", t)
        if fused is not None:
            qkv = fused(x, self.qkv_proj.weight, self.input_norm_scale, eps)
        else:
            qkv = self._linear("qkv", self.qkv_proj, self._gnorm("post_norm", "input_norm", x))
        o = self._gnorm("post_norm", "post_attention_norm", self._dense("o_proj", self.o_proj, self.attention(qkv)))
        fused = None if self._torch_at("linear_gate_up", t) else self._fused("gate_up", t)
        if fused is not None:
            h = x + o
            hidden = fused(h, self.gate_up_proj.weight, self.pre_feedforward_norm_scale, eps)
        else:
            add = self._op("add_norm", t)
            if add is not None:
                y, h = add(o, x, self.pre_feedforward_norm_scale, eps)
            else:
                h = x + o
                y = self.pre_feedforward_norm(h)
            hidden = self._gate_up(y)
        return h + self._gnorm("post_norm", "post_feedforward_norm", self._dense("down", self.down_proj, hidden))

    def _gate_up(self, y: torch.Tensor) -> torch.Tensor:
        """The gated activation of gate_up(y): the gate_up role's op where patched (its [gate | up] output gated in
        torch, or the activation itself where the op fuses it), else torch."""
        op = self._op("gate_up", y.shape[0])
        out = self.gate_up_proj(y) if op is None else op(y, self.gate_up_b)
        if out.shape[-1] == self.spec.intermediate_size:  # the op's epilogue gated it
            return out
        gate, up = out.chunk(2, dim=-1)
        return (F.gelu(gate, approximate="tanh") if self.spec.mlp == "geglu" else F.silu(gate)) * up

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Gemma 2's attention of q [1, H, T, D] over k, v [1, kv_heads, keys, D]: the zoo's capped (and, on a sliding
        layer whose window hides keys, windowed) op where patched, else transformers' eager path."""
        s = self.spec
        t, keys = q.shape[2], k.shape[2]
        hides = bool(self.window) and keys > self.window
        op = self._op("attention_local" if hides and s.sliding_window_pattern > 1 else "attention", t)
        if op is not None:
            return op(q, k, v, self.scale)
        if self.torch_attention == "flex":
            return self._flex(q, k, v, hides)
        group = s.num_attention_heads // s.num_key_value_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale
        if s.attn_logit_softcapping:
            scores = torch.tanh(scores / s.attn_logit_softcapping) * s.attn_logit_softcapping
        pos = torch.arange(t, device=q.device)[:, None] + (keys - t)  # the queries' key positions (bottom right)
        key = torch.arange(keys, device=q.device)[None, :]
        hidden = key > pos
        if hides:
            hidden |= key <= pos - self.window
        scores = scores.masked_fill(hidden, torch.finfo(scores.dtype).min)
        return torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)

    def _flex(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, hides: bool) -> torch.Tensor:
        """FlexAttention as transformers runs it: compiled on a GPU, the cap a score_mod, the mask a block mask made
        once per (T, keys) in an eager call (a compiled layer needs one eager call of its token count first)."""
        from torch.nn.attention.flex_attention import create_block_mask

        t, keys = q.shape[2], k.shape[2]
        block_mask = self._block_masks.get((t, keys))
        if block_mask is None:
            shift, window = keys - t, self.window if hides else 0

            def mask_mod(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
                seen = kv_idx <= q_idx + shift
                return seen & (kv_idx > q_idx + shift - window) if window else seen

            block_mask = self._block_masks[(t, keys)] = create_block_mask(mask_mod, None, None, t, keys,
                                                                          device=q.device)
        cap = self.spec.attn_logit_softcapping

        def score_mod(score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor,
                      kv_idx: torch.Tensor) -> torch.Tensor:
            return cap * torch.tanh(score / cap)

        return _flex_fn(q.device.type)(q, k, v, score_mod=score_mod if cap else None, block_mask=block_mask,
                                       scale=self.scale, enable_gqa=q.shape[1] != k.shape[1])


_FLEX: dict[str, Callable[..., torch.Tensor]] = {}


def _flex_fn(device_type: str) -> Callable[..., torch.Tensor]:
    """flex_attention, compiled once per process on a GPU (as transformers' flex integration does; uncompiled it
    materialises the scores), as it is on the CPU."""
    if device_type not in _FLEX:
        from torch.nn.attention.flex_attention import flex_attention

        _FLEX[device_type] = torch.compile(flex_attention, dynamic=False) if device_type == "cuda" else flex_attention
    return _FLEX[device_type]
