"""What a GEMM genome needs of its target: shared memory, accumulator registers, and rows that tensor
descriptors (TMA) can address. The genome's validity rules (genomes/gemm.py) and its Gluon backend
(genomes/gemm_gluon.py) both read these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target

__all__ = ["ELEM_BYTES", "DESCRIPTOR_MEMORY", "MAX_ACC_REGS", "MAX_ACC_REGS_TWO_CONSUMERS", "max_acc_regs", "next_pow2",
           "column_blocks", "unaligned_rows", "smem_estimate", "acc_regs_per_thread", "descriptor_ok"]

ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
# memory values that go through tensor descriptors (TMA): built in the kernel, or on the host by the launcher
DESCRIPTOR_MEMORY = ("descriptor", "host_descriptor")
MAX_ACC_REGS = 128  # fp32 accumulator registers per thread beyond which spills are near certain
# ... except in the Gluon rendering's two consumer warp groups, which take 232 registers each from the producer
# (setmaxnreg; operators/gemm/gluon_kernel.py): a 64x320 accumulator per consumer (cuBLAS's 128x320 tile split by
# rows) is 160
MAX_ACC_REGS_TWO_CONSUMERS = 160


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def column_blocks(block_n: int) -> tuple[int, ...]:
    """The power-of-two column blocks a tile of `block_n` columns is computed as (tl.dot and tl.arange need
    powers of two): one block, or for a wide width the largest power of two below it and the rest, itself a power
    of two (96 = 64 + 32, 192 = 128 + 64, 320 = 256 + 64). Widths that are not powers of two quantise better on
    132 SMs (cuBLAS picks 192-wide tiles on such shapes, and 128x320 at 1152x4352x4096: 126 tiles)."""
    if block_n & (block_n - 1) == 0:
        return (block_n,)
    high = 1 << (block_n.bit_length() - 1)
    low = block_n - high
    if low & (low - 1):
        raise ValueError(f"BLOCK_N={block_n} is neither a power of two nor the sum of two")
    return high, low


def unaligned_rows(problem: Problem) -> tuple[str, ...]:
    """Row lengths among K (rows of A) and N (rows of B and C) that are not multiples of 16 bytes: tensor
    descriptors (TMA) cannot address such rows without a padded copy."""
    e = ELEM_BYTES[problem.dtype]
    return tuple(d for d in ("K", "N") if (problem.dims[d] * e) % 16)


def smem_estimate(g: Mapping[str, Any], dtype: str, b_tiles: int = 1, reads_tile: bool = False) -> int:
    """Bytes of shared memory the kernel needs: the pipelined A and B tiles (`b_tiles` of B per K step: 2 for
    SwiGLU's gate and up), plus the output staging tile when the epilogue goes through a tensor descriptor
    (halved by epilogue subtiling), plus, when the epilogue reads a tile of another tensor (a residual), the
    layout conversion of one column block (sm_90, Triton 3.6: 128x192 persistent host-TMA tiles of 4 stages
    asked for 245792 bytes with a residual, 32 KiB more than without)."""
    e = ELEM_BYTES[dtype]
    if reads_tile:
        return smem_estimate(g, dtype, b_tiles) + g["BLOCK_M"] * column_blocks(g["BLOCK_N"])[0] * e
    tma = g["memory"] in DESCRIPTOR_MEMORY
    # a K loop with its own depth (loop_stages > 0) replaces the kernel's num_stages for that loop; a
    # persistent pointer kernel is counted one stage deeper (seen in sm_90 compiles), a persistent TMA one
    # is not (sm_90 compiles of 128x128x64 and 128x256x64 tiles, 2-4 stages, both descriptor kinds)
    stages = (g["loop_stages"] or g["num_stages"]) + (1 if g["persistent"] and not tma else 0)
    # an unrolled, pipelined K loop keeps a set of stage buffers per unrolled copy of its loads (seen in sm_90
    # compiles: loop_unroll=4 allocated four times the shared memory of the same genome unrolled once)
    per_stage = (g["BLOCK_M"] * g["BLOCK_K"] + b_tiles * g["BLOCK_K"] * g["BLOCK_N"]) * e
    operands = stages * per_stage * g["loop_unroll"]
    if not tma:
        return operands
    epilogue = g["BLOCK_M"] * g["BLOCK_N"] * e // (2 if g["epilogue_subtile"] else 1)
    if g["persistent"] or g["warp_specialize"]:
        return operands + epilogue  # the next tile's loads are in flight while this one is stored
    # a plain TMA kernel stages its output in the operand buffers, free once its K loop is done (sm_90 compiles)
    return max(operands, epilogue)


def max_acc_regs(g: Mapping[str, Any]) -> int:
    """The accumulator registers per thread a genome's consumers may hold (MAX_ACC_REGS, or more for two Gluon
    consumers)."""
    if g["backend"] == "gluon" and g["consumers"] == 2:
        return MAX_ACC_REGS_TWO_CONSUMERS
    return MAX_ACC_REGS


def acc_regs_per_thread(g: Mapping[str, Any], b_tiles: int = 1) -> int:
    """fp32 accumulator registers per thread of a consumer (row-split Gluon consumers each hold BLOCK_M / consumers
    rows)."""
    rows = g["BLOCK_M"] // g["consumers"] if g["consumer_split"] == "rows" else g["BLOCK_M"]
    return b_tiles * rows * g["BLOCK_N"] // (32 * g["num_warps"])


def descriptor_ok(g: Mapping[str, Any], problem: Problem, target: Target) -> bool:
    """Tensor descriptors need Hopper or later and 16-byte aligned row strides for A, B and C, unless the
    launcher copies unaligned operands into padded rows (host descriptors only: they take strides at run time)."""
    padded = g["pad_rows"] and g["memory"] == "host_descriptor"
    return target.arch >= 90 and (padded or not unaligned_rows(problem))
