"""The kernel problems of a Gemma-2 layer at T tokens (evo.zoo.gemma: a spec with post_norms), beside
evo.zoo.problems' Llama-style plan. A Gemma-2 layer runs

    x -> input_norm -> qkv -> RoPE -> attention (logits capped; every other layer a sliding window) -> o_proj
      -> post_attention_norm, + x = h -> pre_feedforward_norm -> gate_up (GeGLU) -> down -> post_feedforward_norm, + h

every norm scaling by (1 + weight) in fp32: evo's norm operators take 1 + weight (fp32) as their weight, which is the
same formula. The plan per T:
- T <= 16: linear_qkv (linear+rmsnorm: the input norm fused), linear_o_proj (linear: the post-attention norm comes
  before the residual add), linear_gate_up (linear+rmsnorm+geglu: the pre-feedforward norm fused), linear_down
  (linear), linear_lm_head (linear+rmsnorm: the final norm fused); post_norm (rmsnorm, the two post norms), their
  residual adds in torch.
- T > 16: qkv, o_proj, down and lm_head as gemm; gate_up as gemm+geglu (the GEMM on the merged [gate | up] weight with
  GeGLU in its epilogue, as a Llama layer's gemm+swiglu); post_norm (rmsnorm) and add_norm (rmsnorm+residual: the
  residual add and the norm after it, the pre-feedforward norm and the next layer's input norm).
- attention: `attention+causal+softcap<cap>` on the global layers and `...+window<W>` on the sliding ones while
  context + T exceeds the window (else one role: the window covers every key); at T <= 16 with a context also
  `cache_attention+softcap<cap>` (role cache_attention): the decode step over a static cache, whose mask carries the
  causal limit and, on the sliding layers, the window, so one op serves every layer.
Each part run in torch gets one note line.
"""

from __future__ import annotations

from typing import Any

from evo.zoo.model import ModelSpec

__all__ = ["gemma_layer_problems", "attention_name", "cache_attention_name"]


def _cap_text(cap: float) -> str:
    return str(int(cap)) if float(cap).is_integer() and abs(cap) < 1e15 else repr(float(cap))


def attention_name(cap: float, window: int) -> str:
    """The causal attention variant of logit cap `cap` and window `window` (0: none), spelled as the operator spells
    it (operators/attention/names.py; the engine reaches operators through the registry only, which checks it)."""
    return "attention+causal" + (f"+softcap{_cap_text(cap)}" if cap else "") + (f"+window{window}" if window else "")


def cache_attention_name(cap: float) -> str:
    """The cache_attention variant of logit cap `cap` (0: none), spelled as the operator spells it."""
    return "cache_attention" + (f"+softcap{_cap_text(cap)}" if cap else "")


def gemma_layer_problems(spec: ModelSpec, kp: Any, t: int, dtype: str, context: int,
                         attention_dtypes: tuple[str, ...], rope: list[Any], linear: bool) -> list[Any]:
    """The problems of one Gemma-2 layer and the model's head (lm_head; the caller adds the sampling softmax), `kp`
    making a KernelProblem at this T, `rope` the rope role's problems; `linear`: the linear roles (T <= 16)."""
    h, inter, q_size = spec.hidden_size, spec.intermediate_size, spec.q_size
    qkv_width = q_size + 2 * spec.kv_size
    gated = spec.mlp  # geglu or swiglu (evo.zoo.gemma checks)
    norm_note = ("norm: Gemma's RMSNorm scales by (1 + weight): every norm op takes 1 + weight in fp32 as its "
                 "weight (the same formula)") if spec.norm == "gemma_rmsnorm" else ""
    head_note = (f"lm_head: the final logits capped, {spec.final_logit_softcapping:g} * tanh(logits / "
                 f"{spec.final_logit_softcapping:g}), in torch before sampling") if spec.final_logit_softcapping \
        else ""
    attention = _attention(spec, kp, t, context, dtype in attention_dtypes, dtype)
    if linear and context and attention[0].operator:  # the decode step over a static cache, its mask passed
        attention.append(_cache_attention(spec, kp, attention[0].sizes))
    if linear:
        return [
            kp("linear_qkv", "linear+rmsnorm+bias" if spec.attention_bias else "linear+rmsnorm", (t, qkv_width, h),
               note=norm_note),
            *rope, *attention,
            kp("linear_o_proj", "linear", (t, h, q_size)),
            kp("post_norm", "rmsnorm", (t, h), uses=2,
               note="post_norm (T <= 16): the post-attention and post-feedforward norms; the residual adds after "
                    "them run in torch (the other norms are the linear roles' prologues)"),
            kp("linear_gate_up", f"linear+rmsnorm+{gated}", (t, inter, h)),
            kp("linear_down", "linear", (t, h, inter)),
            kp("linear_lm_head", "linear+rmsnorm", (t, spec.vocab_size, h), scope="model", note=head_note),
        ]
    up = kp("gate_up", f"gemm+{gated}", (t, inter, h))  # B = [gate | up]: [hidden, 2 inter]; N the gated width
    return [
        kp("add_norm", "rmsnorm+residual", (t, h), uses=2,
           note="add_norm: the residual add and the norm after it, the pre-feedforward norm and the next layer's "
                "input norm (the first layer's input norm and the final norm have its shape)"),
        kp("qkv", "gemm+bias" if spec.attention_bias else "gemm", (t, qkv_width, h), note=norm_note),
        *rope, *attention,
        kp("o_proj", "gemm", (t, h, q_size)),
        kp("post_norm", "rmsnorm", (t, h), uses=2,
           note="post_norm: the post-attention and post-feedforward norms, before their residual adds"),
        up,
        kp("down", "gemm", (t, h, inter)),
        kp("lm_head", "gemm", (t, spec.vocab_size, h), scope="model", note=head_note),
    ]


def _attention(spec: ModelSpec, kp: Any, t: int, context: int, served: bool, dtype: str) -> list[Any]:
    """The attention roles: `attention` (the global layers, or every layer while the window covers every key) and
    `attention_local` (the sliding-window layers while context + T exceeds the window)."""
    cap, window, pattern = spec.attn_logit_softcapping, spec.sliding_window, spec.sliding_window_pattern
    keys = context + t
    sizes = (1, spec.num_attention_heads, spec.num_key_value_heads, t, keys, spec.head_dim)
    if not served:
        return [kp("attention", None, sizes, note=f"attention: no {dtype} kernels; torch runs it")]
    import operators

    for name in {attention_name(cap, 0), attention_name(cap, window)}:
        operators.get(name)  # the registry parses the name: a cap it cannot take is a ValueError naming it
    common = [f"logits capped at {cap:g}"] if cap else []
    if spec.query_pre_attn_scalar and spec.query_pre_attn_scalar != spec.head_dim:
        common.append(f"queries scaled by query_pre_attn_scalar ** -0.5 ({spec.query_pre_attn_scalar:g}), the "
                      "call's scale")
    local = f"{pattern - 1} of every {pattern} layers" if pattern > 1 else "every layer"
    if not window or keys <= window:
        why = [f"the {window}-key sliding window ({local}) covers every key while context + T <= {window}: one "
               "attention for every layer"]
        parts = common + (why if window else [])
        return [kp("attention", attention_name(cap, 0), sizes,
                   note=f"attention: {'; '.join(parts)}" if parts else "")]
    if pattern == 1:
        return [kp("attention", attention_name(cap, window), sizes,
                   note=f"attention: {'; '.join(common + [f'a {window}-key sliding window'])}")]
    return [kp("attention", attention_name(cap, 0), sizes,
               note=f"attention: {'; '.join(common + [f'the global layers (1 of every {pattern})'])}"),
            kp("attention_local", attention_name(cap, window), sizes,
               note=f"attention_local: the layers of a {window}-key sliding window ({local})")]


def _cache_attention(spec: ModelSpec, kp: Any, sizes: tuple[int, ...]) -> Any:
    """The cache_attention role: a decode step over a static cache, as transformers runs it with a bool mask (causal,
    and on a sliding layer the window: the mask says which slots each query sees), the logits capped by the variant."""
    import operators

    name = cache_attention_name(spec.attn_logit_softcapping)
    operators.get(name)  # the registry parses the name: a cap it cannot take is a ValueError naming it
    what = f", logits capped at {spec.attn_logit_softcapping:g}" if spec.attn_logit_softcapping else ""
    window = f"; the sliding layers' {spec.sliding_window}-key window is in their mask" if spec.sliding_window else ""
    return kp("cache_attention", name, sizes,
              note=f"cache_attention: a decode step over a static cache with its mask{what}{window}")
