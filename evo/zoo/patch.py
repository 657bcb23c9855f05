"""Route a reference layer's kernels through given callables (evo kernels from `evo.api.load`), by role.

    from evo.api import load
    layer = patch(DecoderLayer(spec), {"gate_up": load("runs/zoo/tiny_gemm-swiglu"), "norm": load("rmsnorm.py")})
    y = layer(x)            # the SwiGLU GEMM and both norms run evo's kernels; the rest runs torch
    unpatch(layer)          # back to torch

Each role's op is called with the operand order of its operator (operators/gemm/epilogue.py: A, B, then bias, then
residual; operators/rmsnorm.py: x, weight, eps):

    role              operator (evo.zoo.problems)          call
    norm              rmsnorm                              op(x, weight, eps)   both layer norms (and LMHead's)
    qkv               gemm | gemm+bias                     op(x, B_qkv[, bias])
    attention         attention+causal                     op(q, k, v)          [1, H, T, D], k, v over the cache
    o_proj            gemm+residual                        op(attn, B_o, residual)
    gate_up           gemm+swiglu                          op(x, B_gate_up)     B = [gate | up]: [hidden, 2 inter]
    up                gemm[+bias]+gelu | ...+gelu_tanh     op(x, B_up[, bias])
    down              gemm+residual | gemm+bias+residual   op(h, B_down[, bias], residual)
    lm_head           gemm                                 op(x, B_lm_head)     LMHead only
    sampling_softmax  softmax                              op(logits)           LMHead.probabilities only
    rope              rope_cache                           op(qkv, cos, sin, cache, start) -> q [1, H, T, D]
    cache_attention   cache_attention                      op(q, k, v, mask) -> [1, T, H, D]   the decode loop only
    linear_qkv        linear+rmsnorm[+bias]                op(x, W_qkv, input_norm.weight[, bias], eps)  (no norm apart)
    linear_o_proj     linear+residual                      op(attn, W_o, residual)
    linear_gate_up    linear+rmsnorm+swiglu                op(h, W_gate_up, post_attention_norm.weight, eps)
    linear_down       linear[+bias]+residual               op(hidden, W_down[, bias], residual)
    linear_lm_head    linear+rmsnorm                       op(x, W_lm_head, norm.weight, eps)     LMHead only
    fp8_qkv, fp8_o_proj, fp8_gate_up | fp8_up, fp8_down   fp8_gemm+channel   op(x_q, W_q, x_scale, w_scale, dtype)
                      (evo.zoo.layer_fp8's FP8 weights: W_q e4m3 [out, in] in place; x quantized per token in torch)

The `linear_*` roles (evo.zoo.problems.LINEAR_ROLES) read nn.Linear's weight W [out, in] in place (no copy) and run
at T <= 16 (LINEAR_MAX_TOKENS); at more rows the gemm role (or torch) runs. One that fuses a norm replaces that norm's
call too. A projection's bias is passed after the norm weight (the linear operators' order). `rope`
needs the layer's KV cache (context >= 1): it gets fp32 cos/sin tables of the cache's positions and the start
position as a device tensor, made once here (DecoderLayer.rope_cache_args), and the cache whole, written in place.

A role whose op's module (an `evo export --all` module, as each of a zoo module's operators is) says by its USES that
its baseline runs at a token count leaves that count to the layer's torch code (`module.torch_tokens[role]`, made
here; evo.zoo.uses says why): a fused linear role runs the norm, nn.Linear and SwiGLU as the unpatched layer does.

A run directory of `evo zoo`'s experiment holds one elite per shape; `load(run)` without a shape dispatches by
the input's shape (to the nearest measured one for a token count the plan was not made for).

B is the nn.Linear weight's transpose, made contiguous ONCE here and kept as a non-persistent buffer
(`<role>_b`), so no call transposes a weight; it costs a second copy of each patched weight. Patch after the
weights are final: a buffer does not follow later changes to the weight (patch again to refresh it).
`norm` passes the layer's eps to the op, so an rmsnorm kernel uses the model's eps, not the operator's default
(1e-6). Give evo.api's callables (`load`, `as_torch_op`), not a rendered module's bare `rmsnorm` entry, which
takes `out` before `eps`.

The ops are called the same way in eager code and under torch.compile, where evo.api's callables are torch custom ops:
`torch.compile(layer, fullgraph=True)` traces the patched layer without a graph break (tested on the CPU with
the aot_eager backend and rendered kernels in the Triton interpreter; not yet on a GPU with inductor).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from evo.zoo.hf_roles import DTYPE_NAMES
from evo.zoo.layer import DecoderLayer, LMHead, linears
from evo.zoo.problems import LINEAR_ROLES
from evo.zoo.uses import base_role, baseline_tokens

__all__ = ["patch", "unpatch", "roles_of", "torch_tokens"]


def roles_of(module: DecoderLayer | LMHead) -> tuple[str, ...]:
    """The roles `module` can route: the norm, one per GEMM it runs (gate_up or up, by the spec's MLP), a layer's
    rope (with a KV cache) and attention, the head's sampling softmax, and the linear roles its projections allow."""
    if isinstance(module, LMHead):
        return ("norm", "lm_head", "linear_lm_head", "sampling_softmax")
    if hasattr(module, "layer_roles"):  # another layer kind (evo.zoo.layer_moe, evo.zoo.layer_gemma) says its own
        return module.layer_roles()
    fused = tuple(r for r in LINEAR_ROLES if LINEAR_ROLES[r][0] in linears(module) and r not in _unservable(module))
    cached = ("rope", "cache_attention") if module.context else ()  # cache_attention: the decode loop's attention
    return ("norm", *linears(module), *cached, "attention", *fused)


def _unservable(module: DecoderLayer | LMHead) -> dict[str, str]:
    """Roles of the layer's kind that this layer cannot take, and why (one clause)."""
    out = {}
    if isinstance(module, DecoderLayer) and not module.context:
        out["rope"] = "it has no KV cache (context 0) for rope_cache to write"
    elif isinstance(module, DecoderLayer) and module.spec.qk_norm:
        out["rope"] = "its q and k are normed per head before RoPE (qk_norm), which rope_cache does not"
    return out


def patch(module: DecoderLayer | LMHead, ops: Mapping[str, Callable[..., object]]) -> DecoderLayer | LMHead:
    """`module` itself, with each role in `ops` routed through its op (roles not in `ops` keep torch, and an
    earlier patch of them is dropped). ValueError for a role the module does not run or an op that is not
    callable, before anything changes."""
    if not isinstance(module, (DecoderLayer, LMHead)):
        raise ValueError(f"patch takes a DecoderLayer or an LMHead; got {type(module).__name__}")
    roles, unservable = roles_of(module), _unservable(module)
    for role, op in ops.items():
        if role in unservable:
            raise ValueError(f"{type(module).__name__} of {module.spec.name} cannot take role {role!r}: "
                             f"{unservable[role]}")
        if role not in roles:
            raise ValueError(f"{type(module).__name__} of {module.spec.name} has no role {role!r}; its roles are "
                             f"{', '.join(roles)}")
        if not callable(op):
            raise ValueError(f"the op for role {role!r} is not callable: {op!r}")
    unpatch(module)
    for role, linear in linears(module).items():
        if role in ops:
            module.register_buffer(f"{role}_b", linear.weight.detach().t().contiguous(), persistent=False)
    if "rope" in ops and isinstance(module, DecoderLayer):
        module.rope_cache_args(module.kv_cache.shape[3])
    module.kernels.update(ops)
    dtype = DTYPE_NAMES.get(next(module.parameters()).dtype, "")
    for role, op in ops.items():
        at = baseline_tokens(op, role, _dims(module, role), dtype)
        if at:
            module.torch_tokens[role] = at
    return module


def _dims(module: DecoderLayer | LMHead, role: str) -> tuple[int, ...] | None:
    """The sizes besides the token count that `role`'s problems have in this module (evo.zoo.uses.split_tokens)."""
    s, base = module.spec, base_role(role)
    if base in ("attention", "rope"):
        return (s.num_attention_heads, s.num_key_value_heads, s.head_dim)
    if base in ("norm", "post_norm", "add_norm"):
        return (s.hidden_size,)
    if base in ("moe_gate_up", "moe_down"):  # (E, TOPK, N, K)
        gate_up = base == "moe_gate_up"
        n, k = (s.intermediate_size, s.hidden_size) if gate_up else (s.hidden_size, s.intermediate_size)
        return (s.num_experts, s.experts_per_token, n, k)
    if base == "sampling_softmax":
        return (s.vocab_size,)
    fp8 = module.fp8_linears() if hasattr(module, "fp8_linears") else {}  # evo.zoo.layer_fp8: (N, K) of W_q
    if base in fp8:
        return (fp8[base].out_features, fp8[base].in_features)
    linear = linears(module).get(base)
    if linear is None:
        return None
    # gate_up's N: the gated activation's width
    n = linear.out_features // 2 if base in ("gate_up", "shared_gate_up") else linear.out_features
    return (n, linear.in_features)


def torch_tokens(module: DecoderLayer | LMHead) -> dict[str, tuple[int, ...]]:
    """Patched role -> the token counts it leaves to torch's code (its zoo module's baseline there), sorted."""
    return {role: tuple(sorted(t)) for role, t in module.torch_tokens.items() if t}


def unpatch(module: DecoderLayer | LMHead) -> DecoderLayer | LMHead:
    """`module` itself, every role back on torch and the transposed weights freed."""
    for name in [*(f"{role}_b" for role in linears(module)), "rope_cos", "rope_sin", "rope_start"]:
        if name in module._buffers:
            del module._buffers[name]
    module.kernels.clear()
    module.torch_tokens.clear()
    return module
