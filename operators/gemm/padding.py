"""Padded rows for tensor descriptors, whose rows must start every 16 bytes: a row copy and the padded buffers.

A launcher whose genome pads rows (pad_rows) copies an operand with rows of other than 16-byte multiples into
padded rows first, and computes C into padded rows; evo pastes this file below the marker verbatim into those
modules (Triton's and Gluon's GEMM), as it pastes evo/launch/runtime.py.
"""

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel

PAD_ELEMENTS = 4096  # elements per program of the padding copies (the rendered module states it above)

# ---- evo pastes this file from here on into every module it renders for this family ----


@triton.jit
def copy_rows_kernel(src, dst, rows, cols, src_stride, dst_stride, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
                     ALIGN: tl.constexpr):
    # dst[r, c] = src[r, c] for r < rows, c < cols, rows src_stride and dst_stride elements apart. ALIGN, a power
    # of two, divides cols and both strides: written as multiples of it, they let the loads and stores of rows
    # that do not start on 16 bytes move ALIGN elements at once (Triton specialises only multiples of 16; with
    # cols = 588 every access was one element)
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    inside = (r[:, None] < rows) & (c[None, :] < cols // ALIGN * ALIGN)
    x = tl.load(src + (r * (src_stride // ALIGN) * ALIGN)[:, None] + c[None, :], mask=inside)
    tl.store(dst + (r * (dst_stride // ALIGN) * ALIGN)[:, None] + c[None, :], x, mask=inside)


def _row_copier(rows, cols, src_stride, dst_stride):
    # copy(src, dst): dst[:] = src for [rows, cols] tensors with unit column stride and these row strides (the
    # plan's signature fixes them); a kernel of its own, since torch's copy_ between such strided tensors ran at
    # half the bandwidth on an H100. Column blocks of 64-256 (the fewest masked-off columns), rows filling
    # PAD_ELEMENTS per program (no more than there are); vectors of the largest power of two (up to 8)
    # dividing cols and both strides.
    align = min(cols & -cols, src_stride & -src_stride, dst_stride & -dst_stride, 8)
    block_c = min((256, 128, 64), key=lambda b: triton.cdiv(cols, b) * b)
    block_r = min(PAD_ELEMENTS // block_c, triton.next_power_of_2(rows))
    grid = (triton.cdiv(rows, block_r), triton.cdiv(cols, block_c))
    kernel = BoundKernel(copy_rows_kernel, grid, {"num_warps": 4})

    def copy(src, dst):
        kernel(src, dst, rows, cols, src.stride(0), dst.stride(0), block_r, block_c, align)
        return dst

    return copy


def _padded(rows, cols, like):
    # an empty [rows, cols] view of a buffer whose rows start every 16 bytes (what tensor descriptors
    # need); the bytes past each row are never read (descriptors read zeros beyond the shape)
    step = 16 // like.element_size()
    buf = torch.empty((rows, triton.cdiv(cols, step) * step), dtype=like.dtype, device=like.device)
    return buf[:, :cols]
