"""The reference decoder layer of a model's kind: Llama-style (evo.zoo.layer), Mixture-of-Experts (evo.zoo.layer_moe)
or Gemma 2 (evo.zoo.layer_gemma); with FP8 weights, a Llama-style one (evo.zoo.layer_fp8)."""

from __future__ import annotations

from typing import Any

from evo.zoo.fp8_problems import WEIGHTS
from evo.zoo.layer import DecoderLayer
from evo.zoo.layer_fp8 import FP8DecoderLayer
from evo.zoo.layer_gemma import Gemma2DecoderLayer
from evo.zoo.layer_moe import MoEDecoderLayer
from evo.zoo.model import ModelSpec

__all__ = ["decoder_layer", "layer_kind"]


def layer_kind(spec: ModelSpec) -> type[DecoderLayer]:
    """The reference layer class of `spec`'s kind."""
    if spec.post_norms:
        return Gemma2DecoderLayer
    return MoEDecoderLayer if spec.num_experts else DecoderLayer


def decoder_layer(spec: ModelSpec, experts: str = "loop", layer_index: int = 0, attention: str = "eager",
                  weights: str = "bf16", torch_way: str = "auto", **kwargs: Any) -> DecoderLayer:
    """A reference layer of `spec`'s kind with DecoderLayer's arguments `kwargs`; `experts` (how torch runs a MoE
    layer's experts), `layer_index` (which Gemma-2 layer: 0 slides) and `attention` (how torch runs a Gemma-2 layer's
    attention: eager or flex) apply to their kind only. `weights` "fp8": the FP8-weight layer (a Llama-style `spec`
    only: ValueError in one line otherwise), torch running its FP8 GEMMs by `torch_way`."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}; got {weights!r}")
    if weights == "fp8":
        return FP8DecoderLayer(spec, torch_way=torch_way, **kwargs)
    kind = layer_kind(spec)
    if kind is MoEDecoderLayer:
        return MoEDecoderLayer(spec, experts=experts, **kwargs)
    if kind is Gemma2DecoderLayer:
        return Gemma2DecoderLayer(spec, layer_index=layer_index, attention=attention, **kwargs)
    return DecoderLayer(spec, **kwargs)
