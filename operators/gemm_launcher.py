"""The launcher of a rendered GEMM module: input checks, buffers, grid, and the one kernel launch.

Like the kernel, it holds only what the genome turns on: a persistent grid asks the device for its SM count,
tensor descriptors check alignment and either install Triton's scratch allocator (made in the kernel) or are
built here from the tensors (host descriptors, which need no data: meta tensors do for compiling ahead),
split-K and stream-K allocate fp32 partial tiles and keep per-tile arrival counters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genomes.gemm import DESCRIPTOR_MEMORY, column_blocks
from operators._template import block as _block
from operators._template import wrap as _wrap

__all__ = ["launcher_source", "constexpr_names", "KERNEL_NAME", "ENTRY_NAME", "CPU_NUM_SMS"]

KERNEL_NAME = "matmul_kernel"
ENTRY_NAME = "matmul"
CPU_NUM_SMS = 4  # persistent grid size under the CPU interpreter: a few programs still loop over tiles
SK_MAX_PARTS = 8


def constexpr_names(g: Mapping[str, Any]) -> list[str]:
    """Names of the kernel's compile-time parameters: the genome's constants that its features use."""
    optional = (("GROUP_M", g["GROUP_M"] > 1), ("ROW_ALIGN", bool(g.get("aligned_dims"))),
                ("LOOP_STAGES", g["loop_stages"] > 0), ("LOOP_UNROLL", g["loop_unroll"] > 1),
                ("SPLIT_K", g["split_k"] > 1))
    wide = ["BLOCK_N0", "BLOCK_N1"] if len(column_blocks(g["BLOCK_N"])) > 1 else []
    return ["BLOCK_M", "BLOCK_N", "BLOCK_K"] + wide + [name for name, on in optional if on]


def launcher_source(g: Mapping[str, Any]) -> str:
    """Source of the module's tail: private helpers, then `matmul(a, b, out=None)` launching the kernel."""
    split, persistent, desc = g["split_k"] > 1, g["persistent"], g["memory"] in DESCRIPTOR_MEMORY
    host, stream_k = g["memory"] == "host_descriptor", g["persistent"] and g["stream_k"]
    out = "_DTYPES = (torch.float16, torch.bfloat16, torch.float32)\n"
    if g["pad_rows"]:
        out += "PAD_BLOCK_R, PAD_BLOCK_C = 8, 256  # rows and columns per program of the padding copies\n"
    if stream_k:
        out += (f"SK_MAX_PARTS = {SK_MAX_PARTS}  # programs that may share one stream-K tile "
                "(bounds the partials its last program sums)\n")
    if split or stream_k:
        out += "_COUNTERS = {}  # (device, number of tiles) -> int32 arrival counters, all zero between launches\n"
    if persistent:
        out += "\n\n" + _block(f"""
            def _num_sms(device):
                if device.type == "cuda":
                    return torch.cuda.get_device_properties(device).multi_processor_count
                return {CPU_NUM_SMS}  # CPU interpreter: a few programs still loop over several tiles
        """, 0)
    if g["pad_rows"]:
        out += "\n\n" + _block("""
            @triton.jit
            def copy_rows_kernel(src, dst, rows, cols, src_stride, dst_stride, BLOCK_R: tl.constexpr,
                                 BLOCK_C: tl.constexpr):
                # dst[r, c] = src[r, c] for r < rows, c < cols, rows src_stride and dst_stride elements apart
                r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
                c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
                inside = (r[:, None] < rows) & (c[None, :] < cols)
                x = tl.load(src + r[:, None] * src_stride + c[None, :], mask=inside)
                tl.store(dst + r[:, None] * dst_stride + c[None, :], x, mask=inside)


            def _copy_rows(src, dst):
                # dst[:] = src for 2-D tensors of one shape with unit column stride; a kernel of its own, since
                # torch's copy_ between such strided tensors ran at half the bandwidth on an H100
                rows, cols = src.shape
                grid = (triton.cdiv(rows, PAD_BLOCK_R), triton.cdiv(cols, PAD_BLOCK_C))
                copy_rows_kernel[grid](src, dst, rows, cols, src.stride(0), dst.stride(0), BLOCK_R=PAD_BLOCK_R,
                                       BLOCK_C=PAD_BLOCK_C, num_warps=4)
                return dst


            def _padded(rows, cols, like):
                # an empty [rows, cols] view of a buffer whose rows start every 16 bytes (what tensor descriptors
                # need); the bytes past each row are never read (descriptors read zeros beyond the shape)
                step = 16 // like.element_size()
                buf = torch.empty((rows, triton.cdiv(cols, step) * step), dtype=like.dtype, device=like.device)
                return buf[:, :cols]
        """, 0)
    if desc and not host:
        out += "\n\n" + _block("""
            def _scratch(device):
                # in-kernel tensor descriptors are written to global scratch memory that Triton asks for
                def alloc(size, alignment, stream):
                    return torch.empty(size, dtype=torch.int8, device=device)

                return alloc
        """, 0)
    if split or stream_k:
        out += "\n\n" + _block("""
            def _arrival_counters(device, num_tiles):
                # Allocated zeroed once; each tile's last program resets its counter. Like cuBLAS's workspace,
                # one entry must not serve launches running concurrently on different streams.
                key = (str(device), num_tiles)
                if key not in _COUNTERS:
                    _COUNTERS[key] = torch.zeros(num_tiles, dtype=torch.int32, device=device)
                return _COUNTERS[key]
        """, 0)
    out += "\n\n" + _block('''
        def matmul(a, b, out=None):
            """C = A @ B for row-major contiguous A[M, K] and B[K, N] of one dtype (fp16, bf16 or fp32).

            C has the inputs' dtype (accumulation is fp32) and is written into `out` when given.
            """
            if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.ndim == 2 and b.ndim == 2):
                raise ValueError("matmul expects two 2-D tensors A[M, K] and B[K, N]")
            if a.shape[1] != b.shape[0]:
                raise ValueError(f"inner dimensions differ: A is {tuple(a.shape)}, B is {tuple(b.shape)}")
            if a.dtype != b.dtype or a.dtype not in _DTYPES:
                raise ValueError(f"A and B must share one dtype of fp16, bf16, fp32; got {a.dtype} and {b.dtype}")
            if a.device != b.device:
                raise ValueError(f"A is on {a.device} but B is on {b.device}")
            if not (a.is_contiguous() and b.is_contiguous()):
                raise ValueError("A and B must be row-major contiguous (call .contiguous() first)")
            M, K = a.shape
            N = b.shape[1]
            if max(M * K, K * N, M * N) >= 2**31:
                raise ValueError(f"{M}x{N}x{K} needs 64-bit offsets; this kernel computes them in 32 bits")
            if out is None:
                out = torch.empty((M, N), device=a.device, dtype=a.dtype)
            elif (tuple(out.shape), out.dtype, out.device) != ((M, N), a.dtype, a.device) or not out.is_contiguous():
                raise ValueError(f"out must be a contiguous {M}x{N} {a.dtype} tensor on {a.device}")
            if M == 0 or N == 0:
                return out
            if K == 0:
                return out.zero_()
    ''', 0)
    if g["pad_rows"]:  # remember the caller's buffer: C may be computed into padded rows, then copied into it
        out = out.replace("    if out is None:\n", "    given = out\n    if out is None:\n", 1)
    if desc:
        out += _descriptor_checks(g)
        if host:
            out += _host_descriptors(g)
        else:
            out += _block("triton.set_allocator(_scratch(a.device))", 1)
    if g.get("aligned_dims"):
        cond = " or ".join(f"{d} % ROW_ALIGN" for d in g["aligned_dims"])
        dims = " and ".join(g["aligned_dims"])
        out += _block(f"""
            if {cond}:
                raise ValueError(f"rendered for {dims} divisible by {{ROW_ALIGN}}; got K={{K}}, N={{N}}")
        """, 1)
    out += _block("num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)", 1)
    blocks = [""] if len(column_blocks(g["BLOCK_N"])) == 1 else ["0", "1"]
    operands = (f"a_desc, {', '.join('b_desc' + s for s in blocks)}, {', '.join('c_desc' + s for s in blocks)}"
                if host else "a, b, out")
    args = f"{operands}, M, N, K,"
    if stream_k:
        out += _block("""
            num_sms = _num_sms(a.device)
            grid = (num_sms,)  # every SM takes part in the stream-K phase, even with fewer tiles than SMs
            # the last num_tiles % num_sms tiles are shared by K steps: an even share per program, but no more
            # than SK_MAX_PARTS programs on one tile
            k_tiles = triton.cdiv(K, BLOCK_K)
            sk_tiles = num_tiles % num_sms
            sk_share = max(triton.cdiv(sk_tiles * k_tiles, num_sms), triton.cdiv(k_tiles, SK_MAX_PARTS), 1)
            sk_slots = triton.cdiv(k_tiles, sk_share) + 1  # the most programs whose runs can meet one tile
            partials = torch.empty(max(sk_tiles, 1) * sk_slots * BLOCK_M * BLOCK_N, dtype=torch.float32,
                                   device=a.device)
            counters = _arrival_counters(a.device, max(sk_tiles, 1))
        """, 1)
        args = f"{operands}, partials, counters, M, N, K, num_sms, sk_share, sk_slots,"
    elif persistent:
        args = f"{operands}, M, N, K, num_sms,"
        out += _block("""
            num_sms = _num_sms(a.device)
            grid = (min(num_sms, num_tiles),)
        """, 1)
    elif split:
        out += _block("""
            grid = (num_tiles * SPLIT_K,)
            partials = torch.empty(num_tiles * SPLIT_K * BLOCK_M * BLOCK_N, dtype=torch.float32, device=a.device)
            counters = _arrival_counters(a.device, num_tiles)
        """, 1)
        args = f"{operands}, partials, counters, M, N, K,"
    else:
        out += _block("grid = (num_tiles,)", 1)
    kwargs = _wrap([f"{c}={c}" for c in constexpr_names(g)])
    kwargs += ["num_warps=NUM_WARPS, num_stages=NUM_STAGES,"]
    out += _block(f"{KERNEL_NAME}[grid](", 1) + _block("\n".join([args] + kwargs), 2) + _block(")", 1)
    if g["pad_rows"]:
        out += _block("""
            if given is not None and out is not given:  # C was computed into padded rows
                return _copy_rows(out, given)
        """, 1)
    out += _block("return out", 1)
    return out


def _descriptor_checks(g: Mapping[str, Any]) -> str:
    """Launcher lines that refuse operands a tensor descriptor cannot address, or pad them (pad_rows)."""
    if g["pad_rows"]:
        rows = _block("""
            # Tensor descriptors need rows of 16-byte multiples: an operand whose rows are not is copied into
            # padded rows first, and C is then computed into padded rows (every call pays for the copies, and
            # its timing includes them). Without `out`, C is returned as a view of its padded rows.
            if (K * a.element_size()) % 16:
                a = _copy_rows(a, _padded(M, K, a))
            if (N * b.element_size()) % 16:
                b = _copy_rows(b, _padded(K, N, b))
                out = _padded(M, N, a)
        """, 1)
    else:
        rows = _block("""
            if (K * a.element_size()) % 16 or (N * a.element_size()) % 16:
                raise ValueError(f"tensor descriptors need rows of 16-byte multiples; K={K}, N={N} in {a.dtype}")
        """, 1)
    return rows + _block("""
        if any(t.data_ptr() % 16 for t in (a, b, out)):
            raise ValueError("tensor descriptors need A, B and out to start at 16-byte aligned addresses")
    """, 1)


def _host_descriptors(g: Mapping[str, Any]) -> str:
    """Launcher lines building the host tensor descriptors (one per column block of B and C)."""
    blocks = column_blocks(g["BLOCK_N"])
    names = [("", "BLOCK_N")] if len(blocks) == 1 else [("0", "BLOCK_N0"), ("1", "BLOCK_N1")]
    # padded operands have a row stride of their own; unpadded ones are contiguous
    a_stride, b_stride, c_stride = ("a.stride(0)", "b.stride(0)", "out.stride(0)") if g["pad_rows"] else ("K", "N", "N")
    out = _block(f"""
        # Host tensor descriptors (TMA): out-of-bounds reads return zeros and out-of-bounds writes are
        # dropped, so the kernel needs no masks; the block shapes are part of the compiled signature.
        a_desc = TensorDescriptor(a, [M, K], [{a_stride}, 1], [BLOCK_M, BLOCK_K])
    """, 1)
    for s, w in names:
        out += _block(f"b_desc{s} = TensorDescriptor(b, [K, N], [{b_stride}, 1], [BLOCK_K, {w}])", 1)
    for s, w in names:
        c_block = "BLOCK_N // 2" if g["epilogue_subtile"] else w
        out += _block(f"c_desc{s} = TensorDescriptor(out, [M, N], [{c_stride}, 1], [BLOCK_M, {c_block}])", 1)
    return out
