"""A reference decoder layer (and model head) in plain PyTorch, built from a ModelSpec with seeded random weights.

The layer runs exactly the kernels `evo.zoo.problems.layer_problems` lists, under the same role names, so
`evo.zoo.patch` can route each role through an evo kernel and the result can be checked against this layer:

    x -> input_norm -> qkv -> (qk_norm: q and k per head) -> RoPE -> causal attention (GQA, KV cache) -> o_proj + x = h
    h -> post_attention_norm -> gate_up (SwiGLU) | up (GELU) -> down + h

Weights are nn.Linear's ([out, in]); a GEMM operator's B is their transpose ([in, out], row-major), a linear
operator's (the `linear_*` roles, T <= 16) the weight itself, with the norm before it in its prologue where the role
fuses it (evo.zoo.problems.LINEAR_ROLES): a patched linear_qkv skips the separate input norm. The `rope` role
(rope_cache) rotates q and k and writes K and V into the cache in one launch, from fp32 cos/sin tables of the cache's
positions and a start-position tensor, all made once at patch time. No weights
are downloaded: every tensor is drawn from `seed` (std `init_std`, 0.02 by default, so bf16 activations stay
small and finite). Small weights also make the MLP's and attention's share of the output small next to the
residual, and the activation's input small (where exact and tanh GELU agree to ~1e-7): a check meant to tell such
details apart builds its layer with a larger init_std (0.2 for the tiny shapes of the tests).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from evo.zoo.model import ModelSpec
from evo.zoo.problems import LINEAR_MAX_TOKENS, LINEAR_ROLES

__all__ = ["DecoderLayer", "LMHead", "RMSNorm", "apply_rope", "rope_tables", "linears", "DEFAULT_EPS", "ROPE_THETA",
           "INIT_STD"]

DEFAULT_EPS = 1e-6  # RMSNorm's own default; a layer takes its spec's rms_norm_eps (Llama 3: 1e-5)
ROPE_THETA = 10000.0  # what a spec without rope_theta says
INIT_STD = 0.02


class RMSNorm(nn.Module):
    """y = x * rsqrt(mean(x^2) + eps) * weight, computed in fp32 and cast back (operators/rmsnorm.py's formula)."""

    def __init__(self, size: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x [..., T, D] in the rotate-half convention (Llama, Qwen2, Mistral): the first and the
    second half of each head are the pairs; cos and sin are [T, D] fp32. Computed in fp32, cast back."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def rope_tables(inv_freq: torch.Tensor, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [positions, head_dim] (fp32) of positions 0..positions-1: row p holds what `DecoderLayer.rope`
    computes for position p, bit for bit (the same fp32 product of the position and inv_freq)."""
    freqs = torch.outer(torch.arange(positions, device=inv_freq.device, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().contiguous(), emb.sin().contiguous()


class _Routed(nn.Module):
    """A module whose GEMMs and norms go through `self.kernels` (role -> callable) when a role is patched in
    (evo.zoo.patch), and through torch otherwise: also at the token counts `self.torch_tokens[role]`, where the op's
    module runs its baseline (evo.zoo.uses), so torch.compile sees the layer's own torch code there."""

    ROLES: tuple[str, ...] = ()

    def __init__(self) -> None:
        super().__init__()
        self.kernels: dict[str, Callable[..., torch.Tensor]] = {}
        self.torch_tokens: dict[str, frozenset[int]] = {}

    def _op(self, role: str, tokens: int) -> Callable[..., torch.Tensor] | None:
        """The role's patched op for `tokens` rows; None where torch runs it (not patched, or its baseline's T)."""
        op = self.kernels.get(role)
        return None if op is None or tokens in self.torch_tokens.get(role, ()) else op

    def _torch_at(self, role: str, tokens: int) -> bool:
        """Whether a patched role leaves `tokens` rows to the layer's torch code (its zoo module's baseline there)."""
        return role in self.kernels and tokens in self.torch_tokens.get(role, ())

    def _norm(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        op = self._op("norm", x.shape[0])
        return norm(x) if op is None else op(x, norm.weight, norm.eps)

    def _linear(self, role: str, linear: nn.Linear, x: torch.Tensor,
                residual: torch.Tensor | None = None) -> torch.Tensor:
        """x @ W^T (+ bias) (+ residual) through torch, or as op(x, B[, bias][, residual]) with B = W^T made once
        at patch time (the epilogue operators' operand order: bias before residual)."""
        op = self._op(role, x.shape[0])
        if op is None:
            y = linear(x)
            return y if residual is None else residual + y
        return op(*self._gemm_args(role, linear, x, residual))

    def _dense(self, role: str, linear: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """x @ W^T (no norm, no residual) through `linear_<role>` (op(x, W)) at the token counts it serves, else
        `<role>` (op(x, B)), else torch (also where the role's zoo module runs its baseline)."""
        if self._torch_at(f"linear_{role}", x.shape[0]):
            return linear(x)
        op = self._fused(role, x.shape[0])
        return self._linear(role, linear, x) if op is None else op(x, linear.weight)

    def _fused(self, role: str, tokens: int) -> Callable[..., torch.Tensor] | None:
        """The patched `linear_<role>` op where it serves `tokens` rows (T <= LINEAR_MAX_TOKENS), else None."""
        op = self._op(f"linear_{role}", tokens)
        return op if op is not None and tokens <= LINEAR_MAX_TOKENS else None

    def _project(self, role: str, linear: nn.Linear, x: torch.Tensor, norm: RMSNorm | None = None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        """norm (if given) then the role's projection (+ bias) (+ residual): one `linear_<role>` launch on nn.Linear's
        weight and bias (the norm in its prologue where LINEAR_ROLES fuses it) at T <= LINEAR_MAX_TOKENS where that
        role is patched, else the norm and the gemm role (or torch) apart."""
        if self._torch_at(f"linear_{role}", x.shape[0]):  # the zoo's baseline at this T: the layer's torch code
            y = linear(x if norm is None else norm(x))
            return y if residual is None else residual + y
        op = self._fused(role, x.shape[0])
        if op is None:
            return self._linear(role, linear, x if norm is None else self._norm(norm, x), residual)
        args: tuple[Any, ...] = (x, linear.weight)
        if LINEAR_ROLES[f"linear_{role}"][1]:
            if norm is None:
                raise ValueError(f"linear_{role} fuses the norm before it; no norm was given")
            args += (norm.weight,)
        elif norm is not None:
            args = (self._norm(norm, x), linear.weight)
        args += (linear.bias,) if linear.bias is not None else ()  # the linear operators' order: norm, bias, residual
        args += (residual,) if residual is not None else ()
        return op(*args, norm.eps) if LINEAR_ROLES[f"linear_{role}"][1] else op(*args)

    def _gemm_args(self, role: str, linear: nn.Linear, x: torch.Tensor,
                   residual: torch.Tensor | None = None) -> tuple[Any, ...]:
        args: tuple[Any, ...] = (x, getattr(self, f"{role}_b"))
        args += (linear.bias,) if linear.bias is not None else ()
        return args + ((residual,) if residual is not None else ())

    def patched_roles(self) -> tuple[str, ...]:
        return tuple(r for r in self.ROLES if r in self.kernels)


def _init_(module: nn.Module, seed: int, dtype: torch.dtype, device: str | torch.device, std: float,
           unit_norms: bool = True) -> None:
    """Every parameter drawn from one seeded generator, in fp32 on the CPU (so a seed gives the same weights on
    any device), then cast and moved: Linear weights and biases N(0, std^2), norm weights 1 + N(0, std^2) (N(0, std^2)
    without `unit_norms`: Gemma's norms scale by 1 + weight).
    Nothing requires grad: the layer is an inference reference, and evo's kernels (custom ops) have no backward."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            values = torch.randn(p.shape, generator=gen) * std
            p.copy_(values + 1.0 if unit_norms and name.endswith("norm.weight") else values)
    module.requires_grad_(False)
    module.to(device=device, dtype=dtype)


class DecoderLayer(_Routed):
    """One decoder layer of `spec` (Llama/Qwen2/Mistral-like with SwiGLU, or a plain GELU MLP).

    forward(x [T, hidden]) -> [T, hidden]: T new tokens of one sequence at positions context..context+T-1, each
    attending causally to the `context` tokens of the KV cache, itself and the new tokens before it. The cache
    holds seeded random keys (already rotated) and values of unit scale, as a layer's keys and values are, and
    room for `max_tokens` new ones after them: a forward pass writes its tokens' keys and values there in place,
    as serving code's static or paged caches do (no copy of the whole cache per call), and attends over the
    cache up to them. It writes the same positions every call, so every call sees the same problem. Every kernel
    sees the operands the kernel problems of T tokens and this context describe (evo.zoo.problems).
    """

    ROLES = ("norm", "qkv", "rope", "attention", "o_proj", "gate_up", "up", "down", "linear_qkv", "linear_o_proj",
             "linear_gate_up", "linear_down")

    def __init__(self, spec: ModelSpec, dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu",
                 seed: int = 0, eps: float | None = None, rope_theta: float | None = None,
                 init_std: float = INIT_STD, context: int = 0, max_tokens: int = 2048) -> None:
        super().__init__()
        if spec.head_dim % 2:
            raise ValueError(f"{spec.name}: head_dim {spec.head_dim} is odd; rotary embedding pairs its halves")
        self._check_kind(spec)
        self.spec = spec
        h = spec.hidden_size
        eps = spec.rms_norm_eps if eps is None else eps
        rope_theta = spec.rope_theta if rope_theta is None else rope_theta
        self.input_norm = RMSNorm(h, eps)
        self.qkv_proj = nn.Linear(h, spec.q_size + 2 * spec.kv_size, bias=spec.attention_bias)
        self.o_proj = nn.Linear(spec.q_size, h, bias=False)  # ModelSpec's attention_bias is Q, K and V's only
        if spec.qk_norm:  # Qwen3: each head's q and k normed before RoPE
            self.q_norm, self.k_norm = RMSNorm(spec.head_dim, eps), RMSNorm(spec.head_dim, eps)
        self.post_attention_norm = RMSNorm(h, eps)
        self._make_mlp(spec, eps)
        _init_(self, seed, dtype, device, init_std, unit_norms=spec.norm != "gemma_rmsnorm")
        inv_freq = rope_theta ** -(torch.arange(0, spec.head_dim, 2, dtype=torch.float32) / spec.head_dim)
        self.register_buffer("inv_freq", inv_freq.to(device), persistent=False)  # fp32 whatever the dtype
        if isinstance(context, bool) or not isinstance(context, int) or context < 0:
            raise ValueError(f"context must be an integer >= 0 (tokens in the KV cache); got {context!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1 (new tokens per call); got {max_tokens!r}")
        self.context, self.max_tokens = context, max_tokens
        gen = torch.Generator().manual_seed(seed + 1)
        cache = torch.randn(2, 1, spec.num_key_value_heads, context, spec.head_dim, generator=gen)
        room = torch.zeros(2, 1, spec.num_key_value_heads, max_tokens if context else 0, spec.head_dim)
        # [keys; values] x [1, kv_heads, context + max_tokens, head_dim]: the seeded context, then the new tokens
        self.register_buffer("kv_cache", torch.cat((cache, room), dim=3).to(device=device, dtype=dtype),
                             persistent=False)
        # torch's lower-right causal bias per token count, made in an eager call: torch.compile cannot construct
        # one inside the graph (a tensor subclass), but takes one that exists, as a user's cached mask
        self._causal_biases: dict[int, object] = {}

    def _check_kind(self, spec: ModelSpec) -> None:
        """ValueError in one line for a spec of another layer kind (evo.zoo.layers.decoder_layer picks the kind)."""
        if spec.post_norms:
            raise ValueError(f"{spec.name}: a Gemma-2 layer (four norms, capped logits, a window on every other "
                             "layer): build it with evo.zoo.layer_gemma.Gemma2DecoderLayer")
        if spec.mlp not in ("swiglu", "gelu", "gelu_tanh"):
            raise ValueError(f"{spec.name}: unknown mlp {spec.mlp!r}; expected swiglu, gelu or gelu_tanh")
        if spec.num_experts:
            raise ValueError(f"{spec.name}: a Mixture-of-Experts MLP ({spec.num_experts} experts, top-"
                             f"{spec.experts_per_token}): build it with evo.zoo.layer_moe.MoEDecoderLayer")

    def _make_mlp(self, spec: ModelSpec, eps: float) -> None:
        """The MLP's modules (before the weights are drawn): the gated SwiGLU's [gate; up] or the plain GELU MLP."""
        h, inter = spec.hidden_size, spec.intermediate_size
        if spec.mlp == "swiglu":  # weight rows [gate; up], so B = W^T is [hidden, 2 * inter] = [gate | up]
            # no bias: a SwiGLU model with mlp_bias is refused by evo.zoo.model (gemm+swiglu takes none)
            self.gate_up_proj = nn.Linear(h, 2 * inter, bias=False)
        else:
            self.up_proj = nn.Linear(h, inter, bias=spec.mlp_bias)
        self.down_proj = nn.Linear(inter, h, bias=spec.mlp_bias)

    def mlp_linears(self) -> dict[str, nn.Linear]:
        """Role -> the nn.Linear of the MLP's GEMM roles (evo.zoo.layer.linears)."""
        up = {"gate_up": self.gate_up_proj} if self.spec.mlp == "swiglu" else {"up": self.up_proj}
        return {"down": self.down_proj, **up}

    @property
    def k_cache(self) -> torch.Tensor:
        """The cached keys of the context, [1, kv_heads, context, head_dim] (a view of `kv_cache`)."""
        return self.kv_cache[0, :, :, :self.context]

    @property
    def v_cache(self) -> torch.Tensor:
        return self.kv_cache[1, :, :, :self.context]

    def rope(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin [T, head_dim] (fp32) of the new tokens' positions context..context+T-1."""
        pos = torch.arange(self.context, self.context + tokens, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def rope_cache_args(self, positions: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cos, sin, start) for the rope role: fp32 tables of at least `positions` rows (non-persistent buffers
        `rope_cos`/`rope_sin`, made again only to grow) and `rope_start`, the context as a one-element int32 device
        tensor."""
        cos = self._buffers.get("rope_cos")
        if cos is None or cos.shape[0] < positions:
            c, s = rope_tables(self.inv_freq, positions)
            self.register_buffer("rope_cos", c, persistent=False)
            self.register_buffer("rope_sin", s, persistent=False)
        if "rope_start" not in self._buffers:
            start = torch.tensor([self.context], dtype=torch.int32, device=self.inv_freq.device)
            self.register_buffer("rope_start", start, persistent=False)
        return self.rope_cos, self.rope_sin, self.rope_start

    def attention(self, qkv: torch.Tensor) -> torch.Tensor:
        """Causal attention of the fused projection qkv [T, q + 2 kv] -> [T, q] over the cache and the new keys
        (the mask aligned to the bottom right); key/value head j serves query heads j*g .. j*g+g-1 (g = heads /
        kv_heads), as repeat_interleave of the kv heads would. Torch runs it as a user would: SDPA, causal by
        is_causal without a cache, with no mask for one token, and with torch's lower-right causal bias else."""
        s = self.spec
        t = qkv.shape[0]
        return self._attend(*self.rotate_and_cache(qkv)).squeeze(0).transpose(0, 1).reshape(t, s.q_size)

    def rotate_and_cache(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [1, H, T, D] rotated, and k, v [1, kv_heads, context + T, D]: the cache up to the new tokens, whose keys
        (rotated) and values are written there in place (by the rope role's one launch where it is patched)."""
        t = qkv.shape[0]
        if self.context and t > self.max_tokens:
            raise ValueError(f"{t} new tokens over a KV cache with room for {self.max_tokens} "
                             "(DecoderLayer's max_tokens)")
        rope = self._op("rope", t)
        if rope is not None and self.context:  # RoPE and the KV write in one launch, the cache passed whole
            q = rope(qkv, self.rope_cos, self.rope_sin, self.kv_cache, self.rope_start)
            end = self.context + t
            k, v = self.kv_cache[0, :, :, :end], self.kv_cache[1, :, :, :end]
        else:
            q, k, v = self.heads(qkv)
            cos, sin = self.rope(t)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if self.context:  # written after the context in place; attention reads the cache up to them
                end = self.context + t
                self.kv_cache[0, :, :, self.context:end].copy_(k)
                self.kv_cache[1, :, :, self.context:end].copy_(v)
                k, v = self.kv_cache[0, :, :, :end], self.kv_cache[1, :, :, :end]
        return q, k, v

    def heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q [1, H, T, D], k and v [1, kv_heads, T, D] of the projection qkv [T, q + 2 kv], before RoPE (with
        qk_norm, q and k normed per head)."""
        s, t = self.spec, qkv.shape[0]
        q, k, v = qkv.split([s.q_size, s.kv_size, s.kv_size], dim=-1)
        q, k, v = (x.reshape(t, -1, s.head_dim).transpose(0, 1).unsqueeze(0) for x in (q, k, v))
        return (self.q_norm(q), self.k_norm(k), v) if s.qk_norm else (q, k, v)

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = self.spec
        t = q.shape[2]
        op = self._op("attention", t)
        if op is not None:
            out = op(q, k, v)
        elif self.context and t > 1:
            bias = self._causal_biases.get(t)
            if bias is None:  # (eager: a compiled layer needs one eager call of its token count first)
                from torch.nn.attention.bias import causal_lower_right

                bias = self._causal_biases[t] = causal_lower_right(t, self.context + t)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                                 enable_gqa=s.num_attention_heads != s.num_key_value_heads)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=not self.context,
                                                 enable_gqa=s.num_attention_heads != s.num_key_value_heads)
        return out

    def mlp(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """down(act(up(x))) + residual, with the gated (SwiGLU) or the plain GELU MLP of the spec."""
        if self.spec.mlp == "swiglu":
            op = self._op("gate_up", x.shape[0])
            if op is None:
                gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
                hidden = F.silu(gate) * up
            else:
                hidden = op(x, self.gate_up_b)
        else:
            op = self._op("up", x.shape[0])
            if op is None:
                hidden = F.gelu(self.up_proj(x), approximate="tanh" if self.spec.mlp == "gelu_tanh" else "none")
            else:
                hidden = op(*self._gemm_args("up", self.up_proj, x))
        return self._project("down", self.down_proj, hidden, residual=residual)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        """The layer's second half: mlp(post_attention_norm(h), residual=h), the norm, gate_up and SwiGLU as one
        linear_gate_up launch where that role serves these rows."""
        if self._torch_at("linear_gate_up", h.shape[0]):  # the zoo's baseline at this T: the layer's torch code
            gate, up = self.gate_up_proj(self.post_attention_norm(h)).chunk(2, dim=-1)
            return self._project("down", self.down_proj, F.silu(gate) * up, residual=h)
        op = self._fused("gate_up", h.shape[0]) if self.spec.mlp == "swiglu" else None
        if op is None:
            return self.mlp(self._norm(self.post_attention_norm, h), residual=h)
        norm = self.post_attention_norm
        hidden = op(h, self.gate_up_proj.weight, norm.weight, norm.eps)
        return self._project("down", self.down_proj, hidden, residual=h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.spec.hidden_size:
            raise ValueError(f"expected x of shape [T, {self.spec.hidden_size}]; got {list(x.shape)}")
        qkv = self._project("qkv", self.qkv_proj, x, norm=self.input_norm)
        h = self._project("o_proj", self.o_proj, self.attention(qkv), residual=x)
        return self.ffn(h)


class LMHead(_Routed):
    """The model's head: the final RMSNorm, then lm_head (hidden -> vocab, no bias). forward(x [T, hidden]) ->
    logits [T, vocab]; probabilities(x) adds the sampling softmax over the vocabulary (in fp32, cast back, as
    operators/softmax.py computes it). With tied embeddings the weight is the embedding table's; here it is
    drawn like any other."""

    ROLES = ("norm", "lm_head", "linear_lm_head", "sampling_softmax")

    def __init__(self, spec: ModelSpec, dtype: torch.dtype = torch.bfloat16, device: str | torch.device = "cpu",
                 seed: int = 0, eps: float | None = None, init_std: float = INIT_STD) -> None:
        super().__init__()
        self.spec = spec
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps if eps is None else eps)
        self.lm_head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        _init_(self, seed, dtype, device, init_std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.spec.hidden_size:
            raise ValueError(f"expected x of shape [T, {self.spec.hidden_size}]; got {list(x.shape)}")
        return self._project("lm_head", self.lm_head, x, norm=self.norm)

    def probabilities(self, x: torch.Tensor) -> torch.Tensor:
        """softmax(forward(x)) over the vocabulary [T, vocab]: what sampling draws the next tokens from."""
        logits = self(x)
        op = self._op("sampling_softmax", logits.shape[0])
        return torch.softmax(logits.float(), dim=-1).to(logits.dtype) if op is None else op(logits)


def linears(module: DecoderLayer | LMHead) -> Mapping[str, nn.Linear]:
    """Role -> the nn.Linear whose GEMM that role runs (its B is the weight's transpose)."""
    if isinstance(module, LMHead):
        return {"lm_head": module.lm_head}
    return {"qkv": module.qkv_proj, "o_proj": module.o_proj, **module.mlp_linears()}
