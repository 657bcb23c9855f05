"""evo.zoo.fp8_linear: weights quantized per output channel and activations per token as FP8 checkpoints and serving
stacks do it, torch's two ways of the FP8 GEMM (torch._scaled_mm, dequantize + matmul) and the zoo op's call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from evo.zoo.fp8_linear import FP8_MAX, FP8Linear, fp8_matmul, pick_torch_way, quantize_rows, quantize_tokens


def _linear(n: int = 48, k: int = 64, bias: bool = False, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    linear = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        linear.weight.mul_(torch.linspace(0.1, 4.0, n)[:, None])  # channels of very different ranges
    return linear


def test_rows_scale_to_448_and_back():
    ranges = torch.tensor([1e-3, 0.1, 1.0, 30.0, 0.0])[:, None]
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(1)) * ranges
    q, scale = quantize_rows(x)
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32 and scale.shape == (5,)
    assert torch.equal(scale[:4], x[:4].abs().amax(dim=1) / FP8_MAX)
    assert torch.equal(q.float().abs().amax(dim=1)[:4], torch.full((4,), FP8_MAX))  # each row's amax is e4m3's max
    assert torch.equal(q[4].float(), torch.zeros(64)) and scale[4] > 0  # a zero row: no division by zero
    back = q.float() * scale[:, None]
    assert float((back[:4] - x[:4]).norm() / x[:4].norm()) < 0.04  # e4m3: 3 mantissa bits
    assert quantize_tokens(x)[1].shape == (5,)


def test_from_linear_keeps_a_scale_per_output_channel():
    linear = _linear(bias=True).requires_grad_(False)
    fp8 = FP8Linear.from_linear(linear)
    assert fp8.weight.dtype == torch.float8_e4m3fn and fp8.weight.shape == (48, 64) and not fp8.weight.requires_grad
    assert fp8.weight_scale.shape == (48,) and fp8.bias is not None
    # per channel: the small channels keep their precision (one scale for the tensor would flush them)
    err = (fp8.dequantized(torch.float32) - linear.weight).norm(dim=1) / linear.weight.norm(dim=1)
    assert float(err.max()) < 0.04
    x = torch.randn(7, 64, generator=torch.Generator().manual_seed(2))
    ref = linear(x)
    for way in ("scaled_mm", "dequantize"):
        fp8.torch_way = way
        y = fp8(x)
        assert y.shape == (7, 48) and float((y - ref).norm() / ref.norm()) < 0.05, way
        assert float((y - ref).norm() / ref.norm()) > 1e-4, way  # quantized: not the dense result
    # the two torch ways compute the same FP8 product
    x_q, x_scale = quantize_tokens(x)
    a = fp8_matmul(x_q, x_scale, fp8.weight, fp8.weight_scale, torch.float32, "scaled_mm")
    b = fp8_matmul(x_q, x_scale, fp8.weight, fp8.weight_scale, torch.float32, "dequantize")
    assert float((a - b).norm() / b.norm()) < 1e-5


def test_the_op_gets_the_quantized_operands_and_the_bias_is_added_after():
    fp8 = FP8Linear.from_linear(_linear(bias=True))
    seen = []

    def op(x_q, w_q, x_scale, w_scale, dtype):
        seen.append((x_q.dtype, w_q is fp8.weight, x_scale.shape, w_scale is fp8.weight_scale, dtype))
        return fp8_matmul(x_q, x_scale, w_q, w_scale, dtype, "dequantize")

    x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(3)).half()
    y = fp8(x, op)
    assert seen == [(torch.float8_e4m3fn, True, (6,), True, torch.float16)]
    fp8.torch_way = "dequantize"
    assert y.shape == (2, 3, 48) and torch.equal(y, fp8(x))


def test_torch_way_falls_back_to_dequantize_in_one_line(monkeypatch):
    assert pick_torch_way("cpu", torch.float16)[0] in ("scaled_mm", "dequantize")

    def refuse(*args, **kwargs):
        raise RuntimeError("Only bf16 high precision output types are supported for row-wise scaling.\nmore")

    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    way, why = pick_torch_way("cpu", torch.float16)
    assert way == "dequantize" and "\n" not in why and "row-wise scaling. more" in why
    assert why.startswith("torch._scaled_mm does not run row-wise scales with float16 out on cpu")
    with pytest.raises(ValueError, match="torch_way must be one of scaled_mm, dequantize; got 'cublas'"):
        FP8Linear(4, 4, torch_way="cublas")
