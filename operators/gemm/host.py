"""The host side both GEMM launchers share: the checks of a call's arguments (ValueError naming what is wrong), the
empty products, the host tensor descriptors' shapes and boxes, padded rows for descriptors, and the stream-K shares.
operators/gemm/plan.py (the Triton GEMM) and operators/gemm/gluon_plan.py (the Gluon GEMM) build their launch plans
on them, each from the genome's CONFIG.

evo pastes this file below the marker verbatim into every GEMM module it renders (before its launch plan); with
pad_rows the module also carries operators/gemm/padding.py (_padded, _row_copier).
"""

import weakref

import torch
import triton

from operators.gemm.padding import _padded, _row_copier

# ---- evo pastes this file from here on into every module it renders for this family ----


_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}  # the operands' dtypes, named
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
