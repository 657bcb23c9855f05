"""FP8 e4m3 quantization as checkpoints and serving stacks do it, and its inverse: the operator's inputs are made
with it, and its reference and baselines dequantize with it.

A scale is amax / 448 (e4m3's largest finite value) over its group: the whole tensor, a row (a token's activation or
an output channel's weight), a 1x128 group of a row (DeepSeek-V3's activations) or a 128x128 block (its weights,
the last block rows cut at the edge); the values are divided by it and cast to float8_e4m3fn.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FP8_MAX", "GROUPINGS", "quantize", "expanded_scale", "dequantize"]

FP8_MAX = 448.0
GROUPINGS = ("tensor", "row", "group", "block")
WIDTH = 128  # of a group and of a block's side


def quantize(x: Any, grouping: str) -> tuple[Any, Any]:
    """(x as float8_e4m3fn, its float32 scales) for a 2-D float tensor `x` [R, K]; scales of shape (1,) for
    `tensor`, (R,) for `row`, (R, K / 128) for `group`, (ceil(R / 128), K / 128) for `block` (K a multiple of 128
    for the last two)."""
    import torch

    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {', '.join(GROUPINGS)}; got {grouping!r}")
    x = x.float()
    rows, k = x.shape
    if grouping == "tensor":
        amax = x.abs().amax().reshape(1)
    elif grouping == "row":
        amax = x.abs().amax(dim=1)
    elif grouping == "group":
        amax = x.reshape(rows, k // WIDTH, WIDTH).abs().amax(dim=-1)
    else:
        blocks = -(-rows // WIDTH)
        padded = torch.nn.functional.pad(x, (0, 0, 0, blocks * WIDTH - rows))
        amax = padded.reshape(blocks, WIDTH, k // WIDTH, WIDTH).abs().amax(dim=(1, 3))
    scale = amax.clamp(min=1e-12) / FP8_MAX
    q = (x / expanded_scale(scale, grouping, rows, k)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, scale.float().contiguous()


def expanded_scale(scale: Any, grouping: str, rows: int, k: int) -> Any:
    """The scales broadcast against a [rows, k] tensor: a scalar, a column [rows, 1], or [rows, k] repeated over
    each group's 128 columns (and each block's 128 rows)."""
    if grouping == "tensor":
        return scale.reshape(())
    if grouping == "row":
        return scale.reshape(rows, 1) if scale.numel() == rows else scale.reshape(())
    if grouping == "group":
        return scale.reshape(rows, k // WIDTH).repeat_interleave(WIDTH, dim=1)
    return scale.repeat_interleave(WIDTH, dim=0)[:rows].repeat_interleave(WIDTH, dim=1)


def dequantize(q: Any, scale: Any, grouping: str, dtype: Any) -> Any:
    """`q` [R, K] times its scales in `dtype` (the cast first, then the product in `dtype`: what a user's eager code
    computes)."""
    rows, k = q.shape
    return q.to(dtype) * expanded_scale(scale, grouping, rows, k).to(dtype)
