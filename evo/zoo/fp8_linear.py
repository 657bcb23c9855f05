"""A linear layer with FP8 weights, as FP8 checkpoints ship them and serving stacks run them (Llama-3 "FP8-dynamic"
checkpoints, vLLM's and transformers' FP8 linear with per-channel weight scales):

- the weight [out, in] in float8_e4m3fn with one float32 scale per output channel (amax / 448 of its row), made once
  from a bf16 or fp16 nn.Linear by `FP8Linear.from_linear` (no download: quantized here);
- the activations quantized per token at run time (dynamic scaling): each row of x [T, in] scaled by its own
  amax / 448 and cast to e4m3 (`quantize_tokens`), in torch, before each projection;
- y = (x_q @ W_q^T) * x_scale[:, None] * w_scale[None, :] in fp32, cast to x's dtype, + bias (kept in x's dtype).

Torch's way of the GEMM (`torch_way`): `scaled_mm`, torch._scaled_mm with row-wise scales (cuBLASLt's FP8 GEMM on a
GPU) where this torch and device run it for the output dtype (`pick_torch_way` tries it once), else `dequantize`:
both operands cast to the output dtype, scaled, then one matmul, as a user without FP8 GEMMs writes it. The zoo's
way is the `fp8_gemm+channel` op: op(x_q, W_q, x_scale, w_scale, out_dtype).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["FP8Linear", "FP8_MAX", "TORCH_WAYS", "quantize_rows", "quantize_tokens", "pick_torch_way",
           "fp8_matmul"]

FP8_MAX = 448.0  # float8_e4m3fn's largest finite value
TORCH_WAYS = ("scaled_mm", "dequantize")
_MIN_AMAX = 1e-12  # a row of zeros gets a tiny scale, not a division by zero


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x [R, K] in float8_e4m3fn, its float32 scales [R]): each row divided by its amax / 448, in fp32. A weight's
    rows are its output channels; an activation's rows are its tokens."""
    xf = x.float()
    scale = xf.abs().amax(dim=-1).clamp(min=_MIN_AMAX) / FP8_MAX
    q = (xf / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale


def quantize_tokens(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [T, K] quantized per token (dynamic activation scaling): (x_q [T, K] e4m3, x_scale [T] float32)."""
    return quantize_rows(x)


def fp8_matmul(x_q: torch.Tensor, x_scale: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
               dtype: torch.dtype, way: str) -> torch.Tensor:
    """Torch's FP8 GEMM of `way` (TORCH_WAYS): y [T, out] in `dtype`."""
    if way == "scaled_mm":
        return torch._scaled_mm(x_q, weight.t(), scale_a=x_scale[:, None], scale_b=weight_scale[None, :],
                                out_dtype=dtype)
    return (x_q.to(dtype) * x_scale[:, None].to(dtype)) @ (weight.to(dtype) * weight_scale[:, None].to(dtype)).t()


def pick_torch_way(device: str | torch.device, dtype: torch.dtype) -> tuple[str, str]:
    """(the way torch runs an FP8 GEMM here, one line saying why): torch._scaled_mm where one call of it with row-wise
    scales and `dtype` out runs on `device`, else dequantize + matmul with the reason."""
    if not hasattr(torch, "_scaled_mm"):
        return "dequantize", "torch has no torch._scaled_mm: torch's FP8 linear dequantizes, then one matmul"
    a, a_scale = quantize_rows(torch.ones(16, 32, device=device))
    w, w_scale = quantize_rows(torch.ones(16, 32, device=device))
    try:
        fp8_matmul(a, a_scale, w, w_scale, dtype, "scaled_mm")
    except Exception as e:  # the reason is the point: whatever this torch and device refuse
        why = " ".join(str(e).split())[:160]
        return "dequantize", (f"torch._scaled_mm does not run row-wise scales with {str(dtype).removeprefix('torch.')} "
                              f"out on {torch.device(device).type} ({type(e).__name__}: {why}): torch's FP8 linear "
                              "dequantizes, then one matmul")
    return "scaled_mm", "torch's FP8 linear: torch._scaled_mm with row-wise scales"


class FP8Linear(nn.Module):
    """nn.Linear's y = x W^T + b with W in float8_e4m3fn and a float32 scale per output channel (`weight`,
    `weight_scale`: parameters without grad, as FP8 checkpoints name them), the input quantized per token at each
    call. forward(x, op=None): torch's way (`self.torch_way`), or `op(x_q, weight, x_scale, weight_scale, dtype)`."""

    def __init__(self, in_features: int, out_features: int, bias: torch.Tensor | None = None,
                 torch_way: str = "dequantize") -> None:
        super().__init__()
        if torch_way not in TORCH_WAYS:
            raise ValueError(f"torch_way must be one of {', '.join(TORCH_WAYS)}; got {torch_way!r}")
        self.in_features, self.out_features, self.torch_way = in_features, out_features, torch_way
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=torch.float8_e4m3fn),
                                   requires_grad=False)
        self.weight_scale = nn.Parameter(torch.empty(out_features, dtype=torch.float32), requires_grad=False)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, torch_way: str = "dequantize") -> FP8Linear:
        """`linear`'s weight quantized per output channel (its bias kept in its dtype), on its device."""
        w = linear.weight.detach()
        out = cls(linear.in_features, linear.out_features, linear.bias, torch_way).to(w.device)
        q, scale = quantize_rows(w)
        with torch.no_grad():
            out.weight.copy_(q)
            out.weight_scale.copy_(scale)
        return out

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight as the checkpoint means it, W_q * scale, in `dtype`."""
        return self.weight.to(dtype) * self.weight_scale[:, None].to(dtype)

    def forward(self, x: torch.Tensor, op: Callable[..., torch.Tensor] | None = None) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        x_q, x_scale = quantize_tokens(x2)
        if op is None:
            y = fp8_matmul(x_q, x_scale, self.weight, self.weight_scale, x.dtype, self.torch_way)
        else:
            y = op(x_q, self.weight, x_scale, self.weight_scale, x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"weight=float8_e4m3fn per-channel scales, torch_way={self.torch_way}")

