"""The launch plan of the Triton GEMM (operators/gemm/kernel.py): checks, grid, workspace and the bound kernel,
worked out once per argument signature; a call then costs a dictionary look-up and the bound launch of evo's launch
runtime (evo/launch/runtime.py).

evo pastes this file below the marker verbatim after the kernel into every GEMM module it renders; the module's
header holds CONFIG (the genome's constants, the kernel's constexprs among them) and the entry function, which
calls `gemm_plan` with it. With pad_rows the module also carries operators/gemm/padding.py (_padded, _row_copier).
The Gluon GEMM's modules paste this file too: operators/gemm/gluon_plan.py calls its checks, host descriptors, padded
rows and stream-K shares.
"""

import weakref
from dataclasses import dataclass

import torch
import triton

from evo.launch.runtime import BoundKernel
from operators.gemm.kernel import matmul_kernel
from operators.gemm.padding import _padded, _row_copier
from operators.gemm.tile_store import SPLIT_GROUP

# ---- evo pastes this file from here on into every module it renders for this family ----


_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}  # the operands' dtypes, named
# the kernel's constexprs, in the order it declares them (CONFIG holds each)
CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_N0", "BLOCK_N1", "WIDE", "GROUP_M", "COLUMN_MAJOR", "MEMORY",
              "PERSISTENT", "STREAM_K", "SPLIT_K", "SUBTILE", "LOOP_STAGES", "LOOP_UNROLL", "WARP_SPECIALIZE",
              "ROW_ALIGN", "ALIGN_K", "ALIGN_N", "SCALE", "BIAS", "ACTIVATION", "SWIGLU", "GEGLU", "RESIDUAL")
SK_MAX_PARTS = 8  # programs that may share one stream-K tile (bounds the partials its last program sums)
CPU_NUM_SMS = 4  # persistent grid size under the CPU interpreter: a few programs still loop over several tiles


def num_sms(device):
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_NUM_SMS


def stream_k_shares(num_tiles, k_tiles, programs):
    """(tiles shared by K steps, K steps per program, partial slots per shared tile) of a stream-K grid of
    `programs`: the last num_tiles % programs tiles are shared, an even share per program but no more than
    SK_MAX_PARTS programs on one tile; a tile's runs can meet at most slots programs."""
    sk_tiles = num_tiles % programs
    sk_share = max(triton.cdiv(sk_tiles * k_tiles, programs), triton.cdiv(k_tiles, SK_MAX_PARTS), 1)
    return sk_tiles, sk_share, triton.cdiv(k_tiles, sk_share) + 1


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


def _check_operands(a, b, out, config, dtypes=_DTYPES):
    """(M, N, K) of the product, after checking A, B (of one of `dtypes`) and out (ValueError naming what is
    wrong)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.ndim == 2 and b.ndim == 2):
        raise ValueError("matmul expects two 2-D tensors A[M, K] and B[K, N]")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in dtypes:
        raise ValueError(f"A and B must share one dtype of {', '.join(dtypes.values())}; got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"A is on {a.device} but B is on {b.device}")
    if not (a.is_contiguous() and b.is_contiguous()):
        raise ValueError("A and B must be row-major contiguous (call .contiguous() first)")
    M, K = a.shape
    N = b.shape[1]
    if config["SWIGLU"] or config["GEGLU"]:
        if N % 2:
            gate = "SwiGLU" if config["SWIGLU"] else "GeGLU"
            raise ValueError(f"{gate} needs B[K, 2N] (the gate's columns, then the up projection's); B has {N} "
                             "columns")
        N //= 2
    if max(M * K, K * N, M * N) >= 2**31:
        raise ValueError(f"{M}x{N}x{K} needs 64-bit offsets; this kernel computes them in 32 bits")
    if out is not None and not (isinstance(out, torch.Tensor) and out.is_contiguous()
                                and (tuple(out.shape), out.dtype, out.device) == ((M, N), a.dtype, a.device)):
        raise ValueError(f"out must be a contiguous {M}x{N} {a.dtype} tensor on {a.device}")
    return M, N, K


def _check_epilogue(bias, residual, scale, M, N, dtype, device, config):
    if config["BIAS"] and not (isinstance(bias, torch.Tensor) and tuple(bias.shape) == (N,) and bias.dtype == dtype
                               and bias.device == device and bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous vector of N={N} {dtype} values on {device}")
    if config["RESIDUAL"] and not (isinstance(residual, torch.Tensor) and tuple(residual.shape) == (M, N)
                                   and residual.dtype == dtype and residual.device == device
                                   and residual.is_contiguous()):
        raise ValueError(f"residual must be a contiguous {M}x{N} {dtype} tensor on {device}")
    # checked once per plan; every call passes float(scale) (Triton would compile an int 1 as a constant)
    if config["SCALE"] and (not isinstance(scale, (int, float)) or isinstance(scale, bool)):
        raise ValueError(f"scale must be a Python number, got {type(scale).__name__}")


def _check_alignment(a, b, out, M, N, K, config):
    """Refuse what a tensor descriptor cannot address (or, with PAD_ROWS, leave rows to be padded) and strides the
    kernel was not rendered for."""
    if config["MEMORY"] != "pointer":
        if not config["PAD_ROWS"] and ((K * a.element_size()) % 16 or (N * a.element_size()) % 16):
            raise ValueError(f"tensor descriptors need rows of 16-byte multiples; K={K}, N={N} in {a.dtype}")
        if a.data_ptr() % 16 or b.data_ptr() % 16 or (out is not None and out.data_ptr() % 16):
            raise ValueError("tensor descriptors need A, B and out to start at 16-byte aligned addresses")
    align = config["ROW_ALIGN"]
    if (config["ALIGN_K"] and K % align) or (config["ALIGN_N"] and N % align):
        dims = " and ".join(d for d in ("K", "N") if config[f"ALIGN_{d}"])
        raise ValueError(f"rendered for {dims} divisible by {align}; got K={K}, N={N}")


def _descriptor_specs(M, N, K, config, strides):
    """The bound kernel's host tensor descriptors: position -> (shape, strides, block) of A, B and C (B's and C's
    second column block at positions 2 and 4 for a wide tile)."""
    bm, bk, n0, n1 = config["BLOCK_M"], config["BLOCK_K"], config["BLOCK_N0"], config["BLOCK_N1"]
    a_stride, b_stride, c_stride = strides
    if config["SWIGLU"] or config["GEGLU"]:  # B[K, 2N]: the gate's columns, then the up projection's (never padded)
        b_cols = b_stride = 2 * N
    else:
        b_cols = N
    c_width = config["BLOCK_N"] // 2 if config["SUBTILE"] else n0
    specs = {0: ([M, K], [a_stride, 1], [bm, bk]), 1: ([K, b_cols], [b_stride, 1], [bk, n0]),
             3: ([M, N], [c_stride, 1], [bm, c_width])}
    if config["WIDE"]:
        specs.update({2: ([K, N], [b_stride, 1], [bk, n1]), 4: ([M, N], [c_stride, 1], [bm, n1])})
    return specs


def _empty_run(M, N, K, new_out, config):
    """run(a, b, bias, residual, scale, out) of a product with nothing to compute (M, N or K zero), else None."""
    if M == 0 or N == 0:
        return lambda a, b, bias, residual, scale, out: new_out() if out is None else out
    if K == 0:
        if any(config[s] for s in ("SCALE", "BIAS", "ACTIVATION", "SWIGLU", "GEGLU", "RESIDUAL")):
            # the epilogue of an empty product is not all zeros: refused rather than guessed
            raise ValueError("K=0: the product is empty; a fused epilogue needs K > 0")
        return lambda a, b, bias, residual, scale, out: (new_out() if out is None else out).zero_()
    return None


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


class _RowPadding:
    """Tensor descriptors need rows of 16-byte multiples: an operand whose rows are not is copied into the plan's
    padded rows first, and C is computed into padded rows (the calls pay for the copies, and their timing includes
    them). Without `out`, C is returned as a view of fresh padded rows, as torch.compile does. B (a weight, in a
    model) is copied once: a call given the same B tensor again, unchanged by torch since (its version counter),
    reuses the padded copy, as torch.compile pads a constant weight once. A CUDA graph captures the copy with the
    call (B may change between replays, and no Python runs then to see it)."""

    def __init__(self, a, b, out, M, N, K):
        self.M, self.N = M, N
        self.pad_a, self.pad_b = bool((K * a.element_size()) % 16), bool((N * b.element_size()) % 16)
        self.pad_c = self.pad_b
        self.a_pad = _padded(M, K, a) if self.pad_a else None
        self.b_pad = _padded(K, N, b) if self.pad_b else None
        self.c_pad = _padded(M, N, a) if self.pad_c and out is not None else None
        a_stride = self.a_pad.stride(0) if self.pad_a else K
        b_stride = self.b_pad.stride(0) if self.pad_b else N
        c_stride = self.b_pad.stride(0) if self.pad_c else N  # C's padded rows are as wide as B's
        self.strides = (a_stride, b_stride, c_stride)
        self.copy_a = _row_copier(M, K, K, a_stride) if self.pad_a else None
        self.copy_b = _row_copier(K, N, N, b_stride) if self.pad_b else None
        self.copy_c = _row_copier(M, N, c_stride, N) if self.pad_c else None
        self.b_copied = [lambda: None, -1]  # (a weak reference to the B last copied, its version then)

    def inputs(self, a, b, out, new_out):
        """(A, B, C) as the kernel reads and writes them: padded copies where the rows need them."""
        if self.pad_a:
            a = self.copy_a(a, self.a_pad)
        if self.pad_b:
            if b.is_cuda and torch.cuda.is_current_stream_capturing():  # a graph replays the copy
                self.copy_b(b, self.b_pad)
            elif self.b_copied[0]() is not b or self.b_copied[1] != b._version:  # another B, or this one changed
                self.b_copied[:] = [weakref.ref(b), b._version]
                self.copy_b(b, self.b_pad)
            b = self.b_pad
        if self.pad_c:  # C in padded rows: a fresh view when returned, the plan's own buffer when copied out
            return a, b, _padded(self.M, self.N, self.b_pad) if out is None else self.c_pad
        return a, b, new_out() if out is None else out

    def output(self, c, out):
        if self.pad_c:
            return c if out is None else self.copy_c(c, out)
        return c
