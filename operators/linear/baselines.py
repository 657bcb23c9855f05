"""What the decode GEMM and its fused variants are measured against, and their exact reference: one description
(`LinearMath`) gives the fp32 reference, the eager PyTorch a user writes (cuBLAS through torch.matmul(x, W.t()),
then one torch op per fused part) and torch.compile max-autotune of that same function, so all three agree by
construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from operators.base import Baseline

__all__ = ["LinearMath", "linear_baselines", "linear_contenders"]


@dataclass(frozen=True)
class LinearMath:
    norm: bool = False  # y = rmsnorm(x) @ W^T: inputs (x, W, norm_weight, ...)
    residual: bool = False  # y += residual: inputs (..., residual)
    swiglu: bool = False  # W is [2N, K], gate rows then up rows: y = silu(x Wg^T) * (x Wu^T)
    bias: bool = False  # y += bias[N] (before the residual): inputs (..., bias, residual)
    geglu: bool = False  # as swiglu with GELU's tanh approximation as the gate (Gemma's gelu_pytorch_tanh)

    @property
    def gated(self) -> bool:
        """W is the merged [2N, K] gate-up weight and y the gated product (SwiGLU or GeGLU)."""
        return self.swiglu or self.geglu

    @property
    def gate(self) -> str:
        return "silu" if self.swiglu else "gelu_tanh"

    @property
    def operands(self) -> tuple[str, ...]:
        """The entry's tensors after x and the weight, in order."""
        named = (("norm_weight", self.norm), ("bias", self.bias), ("residual", self.residual))
        return tuple(name for name, on in named if on)

    @property
    def text(self) -> str:
        x = "rmsnorm(x)" if self.norm else "x"
        y = f"{self.gate}({x} @ Wg^T) * ({x} @ Wu^T)" if self.gated else f"{x} @ W^T"
        return y + (" + bias" if self.bias else "") + (" + residual" if self.residual else "")

    @property
    def weight_form(self) -> str:
        return "[2N, K] (the gate's N rows, then the up projection's)" if self.gated else "[N, K] (nn.Linear's layout)"

    def _split(self, inputs: tuple[Any, ...]) -> tuple[Any, Any, Any, Any, Any]:
        x, w, *rest = inputs
        norm_weight = rest.pop(0) if self.norm else None
        bias = rest.pop(0) if self.bias else None
        residual = rest.pop(0) if self.residual else None
        return x, w, norm_weight, bias, residual

    def reference(self, *inputs: Any, eps: float) -> Any:
        """The exact result in fp32 (the normed rows not rounded)."""
        import torch

        x, w, norm_weight, bias, residual = (t.float() if t is not None else None for t in self._split(inputs))
        if self.norm:
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * norm_weight
        y = torch.matmul(x, w.t()) + (bias if self.bias else 0.0)
        if self.gated:
            gate, up = y.chunk(2, dim=-1)
            y = self._activation(gate) * up
        return y + residual if self.residual else y

    def _activation(self, gate: Any) -> Any:
        """The gate's activation as torch computes it (GeGLU: GELU's tanh approximation, gelu_pytorch_tanh)."""
        import torch

        functional = torch.nn.functional
        return functional.silu(gate) if self.swiglu else functional.gelu(gate, approximate="tanh")

    def eager(self, eps: float) -> Any:
        """The function a PyTorch user writes, in the inputs' dtype: RMSNorm (torch's own where it has one),
        cuBLAS on W's [N, K] layout (F.linear, as nn.Linear, with a bias), then SwiGLU and the residual as torch
        ops."""
        import torch

        functional = torch.nn.functional
        has_rms_norm = hasattr(functional, "rms_norm")

        def linear(*inputs: Any) -> Any:
            x, w, norm_weight, bias, residual = self._split(inputs)
            if self.norm:
                if has_rms_norm:
                    x = functional.rms_norm(x, (x.shape[-1],), norm_weight, eps)
                else:
                    xf = x.float()
                    x = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.float()).to(x.dtype)
            y = functional.linear(x, w, bias) if self.bias else torch.matmul(x, w.t())
            if self.gated:
                gate, up = y.chunk(2, dim=-1)
                y = self._activation(gate) * up
            return y + residual if self.residual else y

        return linear


def linear_baselines(math: LinearMath, eps: float) -> list[Baseline]:
    """The primary baseline: cuBLAS for the plain GEMM, the eager function for a fused variant."""
    plain = not (math.operands or math.gated)
    name = "cublas" if plain else "eager"
    doc = "torch.matmul(x, W.t()) (cuBLAS on nn.Linear's layout)" if plain else \
        f"PyTorch eager: {math.text} as cuBLAS (torch.matmul(x, W.t())) and one torch op per part"
    return [Baseline(name, lambda problem: math.eager(eps), doc)]


def linear_contenders(math: LinearMath, eps: float) -> list[Baseline]:
    """torch.compile(mode='max-autotune-no-cudagraphs') of the eager function: set up once per problem by `evo bench`
    (Inductor picks cuBLAS, its Triton templates or decompose-K and fuses the elementwise parts)."""
    return [Baseline("torch_compile", lambda problem: _compiled(math, eps),
                     f"torch.compile(mode='max-autotune-no-cudagraphs') of the eager {math.text}")]


def _compiled(math: LinearMath, eps: float) -> Any:
    import torch

    torch._dynamo.reset()  # a fresh cache per problem: every shape compiled statically (as operators/gemm/baselines.py)
    fn = math.eager(eps)

    def linear(*inputs: Any) -> Any:
        return fn(*inputs)

    return torch.compile(linear, mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)

