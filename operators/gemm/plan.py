"""The launch plan of the Triton GEMM (operators/gemm/kernel.py): checks, grid, workspace and the bound kernel,
worked out once per argument signature; a call then costs a dictionary look-up and the bound launch of evo's launch
runtime (evo/launch/runtime.py).

evo pastes this file below the marker verbatim after the kernel into every GEMM module it renders; the module's
header holds CONFIG (the genome's constants, the kernel's constexprs among them) and the entry function, which
calls `gemm_plan` with it. Its checks, host descriptors, padded rows and stream-K shares are operators/gemm/host.py's
(pasted before it), which the Gluon GEMM's plan shares.
"""

from dataclasses import dataclass

import torch
import triton

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
from operators.gemm.kernel import matmul_kernel
from operators.gemm.tile_store import SPLIT_GROUP

# ---- evo pastes this file from here on into every module it renders for this family ----


# the kernel's constexprs, in the order it declares them (CONFIG holds each)
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_N0", "BLOCK_N1", "WIDE", "GROUP_M", "COLUMN_MAJOR", "MEMORY",
              "PERSISTENT", "STREAM_K", "SPLIT_K", "SUBTILE", "LOOP_STAGES", "LOOP_UNROLL", "WARP_SPECIALIZE",
              "ROW_ALIGN", "ALIGN_K", "ALIGN_N", "SCALE", "BIAS", "ACTIVATION", "SWIGLU", "GEGLU", "RESIDUAL")


def split_workspace(split):
    """(partial-tile slots, arrival counters) per output tile of a split-K grid of `split` programs per tile: one
    slot each and one counter; beyond 2 * SPLIT_GROUP splits also a slot (its sum) and a counter per group of
    SPLIT_GROUP splits (the kernel's _reduce_split)."""
    group = SPLIT_GROUP.value  # (a tl.constexpr, as the kernel reads it)
    if split <= 2 * group:
        return split, 1
    groups = triton.cdiv(split, group)
    return split + groups, groups + 1


@dataclass
class LaunchPlan:
    """What one argument signature's launches share: the grid, the runtime sizes the kernel takes besides M, N, K,
    and the workspace (fp32 partial tiles and arrival counters: the plan's own, allocated zeroed once, each tile's
    last program resetting its counter; like cuBLAS's workspace, not for launches running concurrently on
    different streams)."""

    grid: tuple
    num_sms: object = None
    sk_share: object = None
    sk_slots: object = None
    partials: object = None
    counters: object = None


def launch_plan(M, N, K, device, config):
    """The grid and workspace of the genome `config` for an M x N x K product on `device`."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    num_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    if config["STREAM_K"]:
        programs = num_sms(device)  # every SM takes part in the stream-K phase, even with fewer tiles than SMs
        sk_tiles, sk_share, sk_slots = stream_k_shares(num_tiles, triton.cdiv(K, config["BLOCK_K"]), programs)
        partials = torch.empty(max(sk_tiles, 1) * sk_slots * bm * bn, dtype=torch.float32, device=device)
        counters = torch.zeros(max(sk_tiles, 1), dtype=torch.int32, device=device)
        return LaunchPlan((programs,), programs, sk_share, sk_slots, partials, counters)
    if config["PERSISTENT"]:
        programs = num_sms(device)
        return LaunchPlan((min(programs, num_tiles),), programs)
    if config["SPLIT_K"] > 1:
        slots, counted = split_workspace(config["SPLIT_K"])
        partials = torch.empty(num_tiles * slots * bm * bn, dtype=torch.float32, device=device)
        counters = torch.zeros(num_tiles * counted, dtype=torch.int32, device=device)
        return LaunchPlan((num_tiles * config["SPLIT_K"],), partials=partials, counters=counters)
    return LaunchPlan((num_tiles,))


def gemm_plan(a, b, bias, residual, scale, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid, workspace and the bound kernel. Returns run(a, b, bias, residual, scale, out) for every call of this
    signature (None for the operands the epilogue does not take). `config` holds the genome's constants."""
    M, N, K = _check_operands(a, b, out, config)
    dtype, device = a.dtype, a.device
    _check_epilogue(bias, residual, scale, M, N, dtype, device, config)

    def new_out():
        return torch.empty((M, N), dtype=dtype, device=device)

    empty = _empty_run(M, N, K, new_out, config)
    if empty is not None:
        return empty
    _check_alignment(a, b, out, M, N, K, config)
    plan = launch_plan(M, N, K, device, config)
    host = config["MEMORY"] == "host_descriptor"
    pad = _RowPadding(a, b, out, M, N, K) if config["PAD_ROWS"] else None
    extra = {}
    if host:
        extra["descriptors"] = _descriptor_specs(M, N, K, config, pad.strides if pad else (K, N, N))
    elif config["MEMORY"] == "descriptor":
        extra["scratch"] = True  # descriptors made in the kernel live in global scratch memory
    kernel = BoundKernel(matmul_kernel, plan.grid, {"num_warps": config["NUM_WARPS"],
                                                    "num_stages": config["NUM_STAGES"]}, **extra)
    consts = tuple(config[name] for name in CONSTEXPRS)
    second = host and config["WIDE"]  # B's and C's second column block: descriptors of their own
    workspace = (plan.partials, plan.counters)
    tail = (*workspace, M, N, K, plan.num_sms, plan.sk_share, plan.sk_slots, *consts)  # the same every call

    if pad is None:
        def run(a, b, bias, residual, scale, out):
            c = out = new_out() if out is None else out
            kernel(a, b, b if second else None, c, c if second else None, bias, residual,
                   None if scale is None else float(scale), *tail)
            return out
    else:
        def run(a, b, bias, residual, scale, out):
            a, b, c = pad.inputs(a, b, out, new_out)
            kernel(a, b, b if second else None, c, c if second else None, bias, residual,
                   None if scale is None else float(scale), *tail)
            return pad.output(c, out)

    run.kernel = kernel  # for inspection
    run.workspace = workspace if plan.partials is not None else None
    return run
