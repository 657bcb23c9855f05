"""Gemma 2 (model_type gemma2) as evo's zoo plans it: its Hugging Face config read into ModelSpec's fields, and the
checks of those fields in either file form. What sets a Gemma-2 layer apart from a Llama's, and the field it becomes:
- the gated MLP gates GELU's tanh approximation (hidden_activation gelu_pytorch_tanh): GeGLU, mlp "geglu";
- its RMSNorm scales by (1 + weight), in fp32 before the cast back (norm "gemma_rmsnorm"), and a layer has four:
  input, post-attention (before the residual add), pre-feedforward, post-feedforward (before the residual add):
  post_norms;
- the attention logits soft-capped (attn_logit_softcapping, 50.0) and the final logits too (final_logit_softcapping,
  30.0);
- a sliding window (sliding_window, 4096) on every other layer, the even ones (sliding_window_pattern 2: layer i
  slides unless (i + 1) is a multiple of the pattern, as Gemma 3's sliding_window_pattern counts);
- the queries scaled by query_pre_attn_scalar ** -0.5 rather than head_dim ** -0.5; head_dim 256 by default.
A field the plan cannot serve is refused in one line naming it (ModelError).
"""

from __future__ import annotations

import math

from evo.experiment.yaml_reader import describe
from evo.zoo.model_error import ModelError

__all__ = ["gemma2_fields", "gemma_checked", "GEMMA_KEYS", "GEMMA2_DEFAULTS"]

# Gemma2Config's defaults (transformers) for the fields a config may leave out
GEMMA2_DEFAULTS = {"head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
                   "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
                   "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": True}
_TANH_GELUS = ("gelu_pytorch_tanh", "gelu_new")  # both 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
# ModelSpec's fields of Gemma 2's layer, in a YAML model file too
GEMMA_KEYS = ("post_norms", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
              "sliding_window_pattern")
MAX_CAP = 1e6  # the attention operator's largest cap (operators/attention/operator.py)


def gemma2_fields(d: dict, file: str) -> dict:
    """ModelSpec's fields (before _build's checks) of a Gemma-2 Hugging Face config `d`."""
    if d.get("attention_bias"):
        raise ModelError(file, "attention_bias", "Gemma 2's attention bias covers o_proj as well as Q, K and V; evo's "
                                                 "Gemma plan has no biases")
    act = d.get("hidden_activation") or d.get("hidden_act") or GEMMA2_DEFAULTS["hidden_activation"]
    if act not in _TANH_GELUS:
        field = "hidden_activation" if d.get("hidden_activation") else "hidden_act"
        raise ModelError(file, field, f"{describe(act)} gating Gemma 2's MLP: evo's GeGLU (linear+geglu) is GELU's "
                                      f"tanh approximation ({', '.join(_TANH_GELUS)}) only")
    fields = {k: d[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                "vocab_size") if d.get(k) is not None}
    for key in ("head_dim", "rms_norm_eps", "rope_theta", "tie_word_embeddings", "query_pre_attn_scalar"):
        fields[key] = d[key] if d.get(key) is not None else GEMMA2_DEFAULTS[key]
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):  # null: no cap
        fields[key] = d.get(key, GEMMA2_DEFAULTS[key]) or 0.0
    window = d.get("sliding_window", GEMMA2_DEFAULTS["sliding_window"])
    fields["sliding_window"] = window or 0
    fields["sliding_window_pattern"] = _pattern(d, file) if window else 1
    fields.update(mlp="geglu", norm="gemma_rmsnorm", post_norms=True)
    return fields


def _pattern(d: dict, file: str) -> int:
    """2: Gemma 2's even layers slide, its odd ones see every key; a config's layer_types (newer transformers write
    one) must say the same."""
    types = d.get("layer_types")
    if types is None:
        return 2
    expected = ["sliding_attention" if i % 2 == 0 else "full_attention"
                for i in range(len(types) if isinstance(types, list) else 0)]
    if not isinstance(types, list) or not types or types != expected:
        raise ModelError(file, "layer_types", "expected Gemma 2's alternation, sliding_attention on even layers and "
                                              f"full_attention on odd ones; got {describe(types)}")
    return 2


def gemma_checked(d: dict, mlp: str, norm: str, experts: int, file: str) -> dict:
    """GEMMA_KEYS of ModelSpec's fields `d` checked (defaults where absent): caps >= 0 (0: none), a scalar >= 0 (0:
    head_dim), a pattern >= 1, and the features of Gemma's layer only in a layer with its four norms (post_norms),
    which evo plans with a gated MLP (geglu or swiglu) and no experts."""
    out = {"post_norms": d.get("post_norms", False)}
    if not isinstance(out["post_norms"], bool):
        raise ModelError(file, "post_norms", f"expected true or false; got {describe(out['post_norms'])}")
    for key, high in (("attn_logit_softcapping", MAX_CAP), ("final_logit_softcapping", MAX_CAP),
                      ("query_pre_attn_scalar", 1 << 24)):
        value = d.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= high \
                or not math.isfinite(value):
            raise ModelError(file, key, f"expected a number from 0 (none) to {high:g}; got {describe(value)}")
        out[key] = float(value)
    pattern = d.get("sliding_window_pattern", 1)
    if isinstance(pattern, bool) or not isinstance(pattern, int) or not 1 <= pattern <= 1 << 10:
        raise ModelError(file, "sliding_window_pattern", f"expected an integer from 1 (every layer slides) to 1024; "
                                                         f"got {describe(pattern)}")
    out["sliding_window_pattern"] = pattern
    gemma_only = [k for k in ("attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar")
                  if out[k]] + (["sliding_window_pattern"] if pattern != 1 else []) \
        + (["mlp"] if mlp == "geglu" else []) + (["norm"] if norm == "gemma_rmsnorm" else [])
    if gemma_only and not out["post_norms"]:
        raise ModelError(file, gemma_only[0], "a feature of Gemma 2's layer, which evo plans with its four norms "
                                              "only (post_norms: true)")
    if out["post_norms"] and mlp not in ("geglu", "swiglu"):
        raise ModelError(file, "mlp", f"{mlp} in a Gemma-style layer (post_norms): evo plans its gated MLP, geglu or "
                                      "swiglu")
    if out["post_norms"] and experts:
        raise ModelError(file, "num_experts", "experts in a Gemma-style layer (post_norms): evo plans a dense MLP "
                                              "there")
    return out
