"""Tiny Hugging Face models of the five families evo.zoo.hf_patch serves, built from configs with seeded random
weights (nothing downloaded), at the tiny zoo's sizes (experiments/models/tiny.yaml: hidden 64, intermediate 128,
4 heads of 16, 2 KV heads, vocab 256), and stand-in ops computing each role's operator with its own reference."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

import operators

FAMILIES = ("llama", "qwen2", "qwen3", "mistral", "phi3")
SIZES = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
             num_hidden_layers=2, rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
             pad_token_id=0)
# weights of std 0.1 (transformers' default is 0.02): the attention and MLP then move the logits enough that a wrong
# op shows, and bf16/fp16 activations stay small
INIT = 0.1


def tiny_model(family: str, dtype: torch.dtype = torch.float32, seed: int = 0, **config: Any) -> torch.nn.Module:
    """A 2-layer causal LM of `family` in eval mode; Qwen2's Q, K and V biases drawn too (its init zeroes them), and
    Qwen3's q and k norms' weights (around 1, as every norm's)."""
    tf = pytest.importorskip("transformers")
    cfg_cls, model_cls = {"llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
                          "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
                          "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
                          "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
                          "phi3": (tf.Phi3Config, tf.Phi3ForCausalLM)}[family]
    torch.manual_seed(seed)
    # Qwen3's config states head_dim (128 by default) where the others derive it: the tiny sizes' 16
    head_dim = {"head_dim": SIZES["hidden_size"] // SIZES["num_attention_heads"]} if family == "qwen3" else {}
    model = model_cls(cfg_cls(**{**SIZES, **head_dim, "initializer_range": INIT, **config})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or name.endswith("norm.weight"):
                p.copy_(torch.randn(p.shape) * INIT + (1.0 if name.endswith("norm.weight") else 0.0))
    return model.to(dtype)


def prompt(tokens: int = 4, batch: int = 1, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, SIZES["vocab_size"], (batch, tokens), generator=torch.Generator().manual_seed(seed))


def rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).norm() / ref.double().norm())


def _norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    assert scale is None or abs(scale - q.shape[-1] ** -0.5) < 1e-12  # the operator's reference scales so
    return operators.get("attention+causal").reference(q, k, v).to(q.dtype)


def gemm_stand_in(name: str) -> Callable[..., torch.Tensor]:
    op = operators.get(name)
    if name.startswith("linear"):
        norm = "rmsnorm" in name
        return lambda *a: op.math.reference(*(a[:-1] if norm else a), eps=a[-1] if norm else 1e-6).to(a[0].dtype)
    return lambda *a: op.reference(*a).to(a[0].dtype)


def stand_ins(base: str = "gemm", fused_norm: bool = False) -> dict[str, Callable[..., torch.Tensor]]:
    """Role -> a pure-torch op of that role's operator (base "gemm": B = W^T; "linear": nn.Linear's weight), in the
    operator's operand order, each naming its operator as evo.api's ops do (`op.operator`)."""
    prologue = "+rmsnorm" if fused_norm else ""
    names = {"norm": "rmsnorm", "qkv": base + prologue, "attention": "attention+causal",
             "o_proj": base + "+residual", "gate_up": base + prologue + "+swiglu", "down": base + "+residual",
             "lm_head": base}
    ops = {}
    for role, name in names.items():
        fn = _norm if role == "norm" else _attention if role == "attention" else gemm_stand_in(name)
        ops[role] = named(fn, name)
    return ops


def named(fn: Callable[..., Any], operator: str) -> Callable[..., Any]:
    def op(*args: Any) -> Any:
        return fn(*args)

    op.operator = operator  # type: ignore[attr-defined]
    return op


def recording(ops: dict[str, Callable[..., Any]], calls: list[tuple[str, tuple]]) -> dict[str, Callable[..., Any]]:
    """The same ops, each appending (role, args) to `calls` (entry and operator kept, so measured shapes still
    read)."""
    def wrap(role: str, op: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append((role, args))
            return op(*args)

        call.operator = getattr(op, "operator", None)  # type: ignore[attr-defined]
        call.entry = getattr(op, "entry", op)  # type: ignore[attr-defined]
        return call

    return {role: wrap(role, op) for role, op in ops.items()}


def measured_as(op: Callable[..., Any], shapes: list[tuple[int, ...]], dtype: str, monkeypatch: Any
                ) -> Callable[..., Any]:
    """`op` as if loaded from a zoo module that measured `shapes` in `dtype` (its entry's module holds them as an
    `evo export --all` module does, `_EVO_VARIANTS`)."""
    module = types.ModuleType(f"evo_test_zoo_{len(sys.modules)}_{id(op)}")
    module._EVO_VARIANTS = {str(i): {"sizes": s, "dtype": dtype} for i, s in enumerate(shapes)}
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def entry(*args: Any) -> Any:
        return op(*args)

    entry.__module__ = module.__name__
    wrapped = named(op, op.operator)
    wrapped.entry = entry  # type: ignore[attr-defined]
    return wrapped
