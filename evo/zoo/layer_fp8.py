"""A Llama-style decoder layer with FP8 weights (`evo zoo MODEL --dtype fp8`'s layer; evo.zoo.fp8_problems plans it):
evo.zoo.layer.DecoderLayer with its four projections' weights quantized to e4m3 per output channel as FP8
checkpoints ship them (evo.zoo.fp8_linear.FP8Linear: drawn in the activations' dtype from the same seed, then
quantized, so the bf16 layer of that seed is the FP8 layer before quantization), the activations quantized per token
at run time before each projection. Norms, RoPE, attention and the KV cache stay in the activations' dtype, as FP8
serving runs them.

    x -> input_norm -> quant -> fp8 qkv -> RoPE -> attention -> quant -> fp8 o_proj + x = h
    h -> post_attention_norm -> quant -> fp8 gate_up -> SwiGLU (or fp8 up -> GELU) -> quant -> fp8 down + h

Torch runs each FP8 GEMM by torch._scaled_mm where this torch and device run it (row-wise scales, the layer's dtype
out), else by dequantize + matmul (`torch_way`; `torch_way_note` says which and why in one line). Patched roles
(evo.zoo.patch): norm (op(x, weight, eps): both norms), fp8_qkv, fp8_o_proj, fp8_gate_up (the merged [gate; up]
weight, SwiGLU after it in torch) or fp8_up (GELU after it), fp8_down, each op(x_q, W_q, x_scale, w_scale, dtype)
on the per-token quantized input (quantized in torch, as the plan notes); rope and attention (and cache_attention for
the decode loop) as the bf16 layer's. The residual adds and biases run in torch. LMHead keeps bf16 weights.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from evo.zoo.fp8_linear import FP8Linear, pick_torch_way
from evo.zoo.fp8_problems import refuse_fp8
from evo.zoo.layer import DecoderLayer, RMSNorm
from evo.zoo.model import ModelSpec

__all__ = ["FP8DecoderLayer"]


class FP8DecoderLayer(DecoderLayer):
    """One decoder layer of `spec` with FP8 weights; DecoderLayer's arguments, and `torch_way`: how torch runs the FP8
    GEMMs ("auto": torch._scaled_mm where it runs here, else "dequantize"; or either by name)."""

    ROLES = ("norm", "rope", "attention", "cache_attention", "fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_up",
             "fp8_down")

    def __init__(self, spec: ModelSpec, *args: Any, torch_way: str = "auto", **kwargs: Any) -> None:
        super().__init__(spec, *args, **kwargs)
        dtype = self.input_norm.weight.dtype
        device = self.input_norm.weight.device
        if torch_way == "auto":
            torch_way, self.torch_way_note = pick_torch_way(device, dtype)
        else:
            self.torch_way_note = f"torch's FP8 linear: {torch_way} (given)"
        self.torch_way = torch_way
        self.qkv_proj = FP8Linear.from_linear(self.qkv_proj, torch_way)
        self.o_proj = FP8Linear.from_linear(self.o_proj, torch_way)
        if spec.mlp == "swiglu":
            self.gate_up_proj = FP8Linear.from_linear(self.gate_up_proj, torch_way)
        else:
            self.up_proj = FP8Linear.from_linear(self.up_proj, torch_way)
        self.down_proj = FP8Linear.from_linear(self.down_proj, torch_way)

    def _check_kind(self, spec: ModelSpec) -> None:
        why = refuse_fp8(spec)
        if why:
            raise ValueError(why)
        super()._check_kind(spec)

    def fp8_linears(self) -> dict[str, FP8Linear]:
        """Role -> the FP8Linear that role's op runs."""
        up = {"fp8_gate_up": self.gate_up_proj} if self.spec.mlp == "swiglu" else {"fp8_up": self.up_proj}
        return {"fp8_qkv": self.qkv_proj, "fp8_o_proj": self.o_proj, **up, "fp8_down": self.down_proj}

    def layer_roles(self) -> tuple[str, ...]:
        """The roles of this layer (evo.zoo.patch.roles_of): the FP8 plan's (evo.zoo.fp8_problems)."""
        cached = ("rope", "cache_attention") if self.context else ()
        return ("norm", *self.fp8_linears(), *cached, "attention")

    def _fp8(self, role: str, x: torch.Tensor) -> torch.Tensor:
        """x [T, in] through the FP8 projection of `role`: quantized per token, then the role's op where it is
        patched for these rows, else torch's way; its bias (if any) added in torch."""
        return self.fp8_linears()[role](x, self._op(role, x.shape[0]))

    def _project(self, role: str, linear: Any, x: torch.Tensor, norm: RMSNorm | None = None,
                 residual: torch.Tensor | None = None) -> torch.Tensor:
        """norm (if given), then the FP8 projection of `role` (qkv, o_proj, down), then the residual add: what the bf16
        layer's forward and the decode loop (evo.zoo.decode) call."""
        y = self._fp8(f"fp8_{role}", x if norm is None else self._norm(norm, x))
        return y if residual is None else residual + y

    def mlp(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        if self.spec.mlp == "swiglu":
            gate, up = self._fp8("fp8_gate_up", x).chunk(2, dim=-1)
            hidden = F.silu(gate) * up
        else:
            hidden = F.gelu(self._fp8("fp8_up", x), approximate="tanh" if self.spec.mlp == "gelu_tanh" else "none")
        return self._project("down", self.down_proj, hidden, residual=residual)

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        return self.mlp(self._norm(self.post_attention_norm, h), residual=h)
