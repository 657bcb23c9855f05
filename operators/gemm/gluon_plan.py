"""The launch plan of the Gluon GEMM (operators/gemm/gluon_kernel.py): checks, grid, workspace and the bound
kernels, worked out once per argument signature, as operators/gemm/plan.py does for the Triton GEMM; the checks,
host descriptors, padded rows and stream-K shares are both plans' (operators/gemm/host.py).

evo pastes this file below the marker verbatim into every Gluon GEMM module it renders, after host.py (and
padding.py for pad_rows); the module's CONFIG holds the genome's constants, and `matmul_kernel` (with
`split_k_reduce` under split-K) is the module's call of the pasted kernel with the genome's switches
(operators/gemm/gluon_source.py), whose parameters this plan passes in their order.
"""

import operator

import torch
import triton
from triton.experimental.gluon import language as gl

from evo.launch.runtime import BoundKernel
from operators.gemm.host import (
    _check_alignment,
    _check_epilogue,
    _check_operands,
    _descriptor_specs,
    _empty_run,
    _RowPadding,
    num_sms,
    stream_k_shares,
)

matmul_kernel = split_k_reduce = None  # the rendered module's, written for its genome

# ---- evo pastes this file from here on into every module it renders for this family ----


GLUON_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}  # wgmma's 16-bit operands
_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}
# host.py's switches that every Gluon genome sets alike: host tensor descriptors, no gate, no subtile, no hint of
# row alignment (rows of other than 16-byte multiples are refused, or padded with PAD_ROWS)
GLUON_FIXED = {"MEMORY": "host_descriptor", "SWIGLU": False, "GEGLU": False, "SUBTILE": False, "ROW_ALIGN": 1,
               "ALIGN_K": False, "ALIGN_N": False}
REDUCE_C = 128  # columns per program of the split-K reduction


def _reduce_rows(M, N, device):
    """Rows per program of the split-K reduction: 32, or fewer where 32 would leave it under four programs an SM
    (640x384 has 60 programs of 32x128 for 132 SMs, each summing its partials at a few hundred GB/s)."""
    for rows in (32, 16):
        if triton.cdiv(M, rows) * triton.cdiv(N, REDUCE_C) >= 4 * num_sms(device):
            return rows
    return 8


def _layout(block, dtype):
    # the widest swizzle the block's rows allow: fewest TMA and wgmma shared-memory transactions
    return gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[dtype])


def _picker(taken):
    """A function of (bias, residual, scale) giving those at the positions `taken` as a tuple: the epilogue's operands
    in matmul_kernel's order."""
    if len(taken) > 1:
        return operator.itemgetter(*taken)
    if taken:
        return lambda given, i=taken[0]: (given[i],)
    return lambda given: ()


def gluon_stream_k(M, N, K, programs, device, config):
    """(sk_share, sk_slots, partials, counters) of a stream-K grid of `programs`: host.py's shares, a partial tile
    per slot of every shared tile, and an arrival counter per consumer of each (a row split's consumers count their
    arrivals apiece). Like cuBLAS's workspace, the plan's own: not for launches running concurrently on different
    streams (each tile's last run resets its counter)."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    num_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    sk_tiles, sk_share, sk_slots = stream_k_shares(num_tiles, triton.cdiv(K, config["BLOCK_K"]), programs)
    partials = torch.empty(max(sk_tiles, 1) * sk_slots * bm * bn, dtype=torch.float32, device=device)
    counters = torch.zeros(max(sk_tiles, 1) * config["CONSUMERS"], dtype=torch.int32, device=device)
    return sk_share, sk_slots, partials, counters


def gluon_plan(a, b, bias, residual, scale, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid, buffers and the bound kernels. Returns run(a, b, bias, residual, scale, out) for every call of this
    signature (None for the operands the epilogue does not take). `config` holds the genome's constants."""
    host = {**GLUON_FIXED, **config}
    M, N, K = _check_operands(a, b, out, host, GLUON_DTYPES)
    dtype, device = a.dtype, a.device
    _check_epilogue(bias, residual, scale, M, N, dtype, device, host)

    def new_out():
        return torch.empty((M, N), dtype=dtype, device=device)

    empty = _empty_run(M, N, K, new_out, host)
    if empty is not None:
        return empty
    _check_alignment(a, b, out, M, N, K, host)
    pad = _RowPadding(a, b, out, M, N, K) if config["PAD_ROWS"] else None
    wide, split, rows = config["WIDE"], config["SPLIT_K"] > 1, config["ROWS"]
    sizes = (M, N, K, config["BLOCK_M"], config["BLOCK_N"], config["BLOCK_K"], config["GROUP_M"],
             config["NUM_STAGES"], config["CONSUMERS"], config["NUM_WARPS"])
    sizes += (config["SPLIT_K"],) * split + (config["BLOCK_N0"], config["BLOCK_N1"]) * wide
    workspace = None
    if config["STREAM_K"]:
        programs = num_sms(device)
        grid = (programs,)  # every SM takes part in the stream-K phase, even with fewer tiles than SMs
        sk_share, sk_slots, partials, counters = gluon_stream_k(M, N, K, programs, device, config)
        sizes += (partials, counters, sk_share, sk_slots)
        workspace = (partials, counters)
    else:
        num_tiles = triton.cdiv(M, config["BLOCK_M"]) * triton.cdiv(N, config["BLOCK_N"])
        grid = (min(num_sms(device), num_tiles * config["SPLIT_K"]),)
    sizes += (rows,) * config["ROW_SPLIT"]
    # host descriptors of A, B and C in matmul_kernel's order (B's and C's second column block for a wide tile),
    # their boxes one consumer's rows; each carries its shared-memory layout into the kernel
    specs = _descriptor_specs(M, N, K, {**host, "BLOCK_M": rows}, pad.strides if pad else (K, N, N))
    order = (0, 1, 2, 3, 4) if wide else (0, 1, 3)
    kernel = BoundKernel(matmul_kernel, grid, {"num_warps": config["NUM_WARPS"]},
                         descriptors={i: (*specs[p], _layout(specs[p][2], dtype)) for i, p in enumerate(order)})
    pick = _picker([i for i, name in enumerate(("BIAS", "RESIDUAL", "SCALE")) if config[name]])
    if split:  # fp32 partials of every split, summed by a second launch that applies the epilogue
        partials = torch.empty((config["SPLIT_K"] * M, N), dtype=torch.float32, device=device)
        workspace = (partials, None)  # (partials, arrival counters) as the Triton plan's: none, a launch sums
        reduce_rows = _reduce_rows(M, N, device)
        reduce = BoundKernel(split_k_reduce, (triton.cdiv(M, reduce_rows), triton.cdiv(N, REDUCE_C)), {"num_warps": 4})
        reduce_sizes = (M, N, config["SPLIT_K"], reduce_rows, REDUCE_C)

    def run(a, b, bias, residual, scale, out):
        if pad is None:
            c = out = new_out() if out is None else out
        else:
            a, b, c = pad.inputs(a, b, out, new_out)
        # the scale a float on every call (Triton would compile an int 1 as a constant)
        operands = pick((bias, residual, None if scale is None else float(scale)))
        if split:
            kernel(*((a, b, b, c, c) if wide else (a, b, c)), partials, *sizes)
            reduce(partials, c, *operands, *reduce_sizes)
        elif wide:
            kernel(a, b, b, c, c, *operands, *sizes)
        else:
            kernel(a, b, c, *operands, *sizes)
        return out if pad is None else pad.output(c, out)

    run.kernel = kernel  # for inspection
    if workspace is not None:
        run.workspace = workspace
    return run
