"""Model specs and inputs shared by the reference-layer tests (tests/zoo/test_layer.py, test_patch.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from evo.zoo import ModelSpec, load_model

MODELS = Path(__file__).resolve().parents[2] / "experiments" / "models"
TINY = load_model(MODELS / "tiny.yaml")  # Llama-like: SwiGLU, 4 query heads over 2 kv heads, no biases
LLAMA = ModelSpec("llama-like", hidden_size=48, intermediate_size=80, num_attention_heads=6, num_key_value_heads=2,
                  head_dim=8, vocab_size=100)
QWEN2 = dataclasses.replace(LLAMA, name="qwen2-like", attention_bias=True)
GELU = ModelSpec("gelu-bias", hidden_size=32, intermediate_size=96, num_attention_heads=4, num_key_value_heads=4,
                 head_dim=8, vocab_size=50, mlp="gelu", mlp_bias=True)
GELU_TANH = dataclasses.replace(GELU, name="gelu-tanh", mlp="gelu_tanh", mlp_bias=False)
SPECS = [TINY, LLAMA, QWEN2, GELU, GELU_TANH]
TINY_MOE = load_model(MODELS / "tiny-moe.yaml")  # Mixtral-shaped: 4 experts top-2, renormalised
TINY_GEMMA2 = load_model(MODELS / "tiny-gemma2.yaml")  # a window of 8 keys on even layers, logits capped at 50


def hidden_states(spec: ModelSpec, tokens: int, dtype: torch.dtype = torch.float32, seed: int = 1) -> torch.Tensor:
    """Seeded activations [tokens, hidden] of `spec`."""
    return torch.randn(tokens, spec.hidden_size, generator=torch.Generator().manual_seed(seed)).to(dtype)
