"""The launcher of a rendered GEMM module: input checks, buffers, grid, and the one kernel launch.

Like the kernel, it holds only what the genome turns on: a persistent grid asks the device for its SM count,
tensor descriptors check alignment and either are made in the kernel (Triton's scratch memory) or are host
descriptors over the operands, split-K and stream-K keep fp32 partial tiles and per-tile arrival counters,
padded rows copy operands whose rows are not 16-byte multiples. All of that is worked out once per argument
signature in `_plan`; a call then costs a dictionary look-up and the bound launch of evo's launch runtime
(evo/launch/runtime.py, pasted into every rendered module).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genomes.gemm import DESCRIPTOR_MEMORY, column_blocks
from operators._template import block as _block
from operators._template import wrap as _wrap
from operators.gemm.launcher_epilogue import epilogue_args as _epilogue_args
from operators.gemm.launcher_epilogue import epilogue_operands, fill_epilogue

__all__ = ["launcher_source", "gluon_launcher_source", "constexpr_names", "KERNEL_NAME", "ENTRY_NAME", "CPU_NUM_SMS"]

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
    """Source of the module's tail: private helpers, `_plan` (everything that depends only on the arguments'
    signature, computed once per signature), then `matmul(a, b, out=None)`, which looks its plan up and runs it."""
    split, persistent, desc = g["split_k"] > 1, g["persistent"], g["memory"] in DESCRIPTOR_MEMORY
    host, stream_k = g["memory"] == "host_descriptor", g["persistent"] and g["stream_k"]
    out = "_DTYPES = (torch.float16, torch.bfloat16, torch.float32)\n"
    out += "_PLANS = PlanCache()  # argument signature -> run(a, b, out): checks, grid and buffers done once\n"
    out += _workspace_constants(g["pad_rows"], stream_k)
    if persistent:
        out += _num_sms_source()
    if g["pad_rows"]:
        out += "\n\n" + _PAD_HELPERS
    out += "\n\n" + _PLAN_HEAD
    if desc:
        out += _descriptor_checks(g)
    if g.get("aligned_dims"):
        cond = " or ".join(f"{d} % ROW_ALIGN" for d in g["aligned_dims"])
        dims = " and ".join(g["aligned_dims"])
        out += _block(f"""
            if {cond}:
                raise ValueError(f"rendered for {dims} divisible by {{ROW_ALIGN}}; got K={{K}}, N={{N}}")
        """, 1)
    out += _block("num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)", 1)
    n_blocks = len(column_blocks(g["BLOCK_N"]))
    operands = ", ".join(["a"] + ["b"] * n_blocks + ["c"] * n_blocks) if host else "a, b, c"
    operands = ", ".join([operands, *epilogue_operands(g)])
    args = f"{operands}, M, N, K"
    if stream_k:
        out += _block(_STREAM_K_PLAN.format(counters="max(sk_tiles, 1)"), 1)
        args = f"{operands}, partials, counters, M, N, K, num_sms, sk_share, sk_slots"
    elif persistent:
        args = f"{operands}, M, N, K, num_sms"
        out += _block("""
            num_sms = _num_sms(device)
            grid = (min(num_sms, num_tiles),)
        """, 1)
    elif split:
        out += _block("""
            grid = (num_tiles * SPLIT_K,)
            partials = torch.empty(num_tiles * SPLIT_K * BLOCK_M * BLOCK_N, dtype=torch.float32, device=device)
            counters = torch.zeros(num_tiles, dtype=torch.int32, device=device)
        """, 1)
        args = f"{operands}, partials, counters, M, N, K"
    else:
        out += _block("grid = (num_tiles,)", 1)
    if split or stream_k:
        out += _block("""
            # The partial tiles and the arrival counters belong to this plan: allocated (zeroed) once, each tile's
            # last program resets its counter. Like cuBLAS's workspace, they must not serve launches running
            # concurrently on different streams.
        """, 1)
    extra = ", descriptors=" + _descriptor_specs(g, n_blocks) if host else ", scratch=True" if desc else ""
    out += _block(f'kernel = BoundKernel({KERNEL_NAME}, grid, {{"num_warps": NUM_WARPS, "num_stages": NUM_STAGES}}'
                  f"{extra})", 1)
    call = _wrap(f"{args}, {', '.join(constexpr_names(g))}".split(", "), 88)
    run = (["", f"def run(a, b, {_epilogue_args(g)}out):"] + _run_prologue(g) + ["    kernel("]
           + [f"        {line}" for line in call] + ["    )"] + _run_epilogue(g) + [""])
    run.append("run.kernel = kernel  # for inspection")
    if split or stream_k:
        run.append("run.workspace = (partials, counters)")
    run.append("return run")
    out += "\n" + _block("\n".join(run), 1)
    return fill_epilogue(out + "\n\n" + _ENTRY, g)


def _workspace_constants(pad_rows: bool, stream_k: bool) -> str:
    """The module constants of the padding copies and of stream-K, for either launcher."""
    out = "PAD_ELEMENTS = 4096  # elements per program of the padding copies\n" if pad_rows else ""
    if stream_k:
        out += (f"SK_MAX_PARTS = {SK_MAX_PARTS}  # programs that may share one stream-K tile "
                "(bounds the partials its last program sums)\n")
    return out


def _num_sms_source() -> str:
    return "\n\n" + _block(f"""
        def _num_sms(device):
            if device.type == "cuda":
                return torch.cuda.get_device_properties(device).multi_processor_count
            return {CPU_NUM_SMS}  # CPU interpreter: a few programs still loop over several tiles
    """, 0)


def gluon_launcher_source(g: Mapping[str, Any]) -> str:
    """The launcher of a Gluon rendering (operators/gemm/gluon_source.py): the plain GEMM's checks, a persistent
    grid, and host tensor descriptors that carry their shared-memory layouts (NVMMA swizzles) into the kernel."""
    out = ("_DTYPES = (torch.float16, torch.bfloat16)\n"
           "_GL_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}\n")
    out += "_PLANS = PlanCache()  # argument signature -> run(a, b, out): checks, grid and descriptors done once\n"
    out += _workspace_constants(g["pad_rows"], g["stream_k"])
    out += _num_sms_source() + ("\n\n" + _PAD_HELPERS if g["pad_rows"] else "") + "\n\n" + _block('''
        def _layout(block, dtype):
            # the widest swizzle the block's rows allow: fewest TMA and wgmma shared-memory transactions
            return gl.NVMMASharedLayout.get_default_for(block, _GL_DTYPES[dtype])
    ''', 0)
    out += "\n\n" + _PLAN_HEAD.replace("fp16, bf16, fp32", "fp16, bf16") + _descriptor_checks(g)
    split, wide = g["split_k"] > 1, len(column_blocks(g["BLOCK_N"])) > 1
    rows = "ROWS" if g["consumer_split"] == "rows" else "BLOCK_M"  # the A box and C store of one consumer
    out += _block(f"""
        num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
        grid = (min(_num_sms(device), num_tiles{' * SPLIT_K' if split else ''}),)
    """, 1) if not g["stream_k"] else _block(_GLUON_STREAM_K_PLAN, 1)
    a_stride, b_stride, c_stride = _row_strides(g)
    if wide:  # a descriptor of B and one of C per column block of the tile
        out += _block(f"""
            blocks = ([{rows}, BLOCK_K], [BLOCK_K, BLOCK_N0], [BLOCK_K, BLOCK_N1], [{rows}, BLOCK_N0],
                      [{rows}, BLOCK_N1])
        """, 1)
        out += _block(f"""
            shapes = ([M, K], [K, N], [K, N], [M, N], [M, N])
            strides = ({a_stride}, {b_stride}, {b_stride}, {c_stride}, {c_stride})
            specs = {{i: (shape, [stride, 1], block, _layout(block, dtype))
                     for i, (shape, stride, block) in enumerate(zip(shapes, strides, blocks))}}
        """ if g["pad_rows"] else """
            specs = {i: (shape, [shape[1], 1], block, _layout(block, dtype))
                     for i, (shape, block) in enumerate(zip(([M, K], [K, N], [K, N], [M, N], [M, N]), blocks))}
        """, 1)
        out += _block(f'kernel = BoundKernel({KERNEL_NAME}, grid, {{"num_warps": NUM_WARPS}}, descriptors=specs)', 1)
    else:
        out += _block(f"""
            blocks = ([{rows}, BLOCK_K], [BLOCK_K, BLOCK_N], [{rows}, BLOCK_N])
            specs = {{0: ([M, K], [{a_stride}, 1], blocks[0], _layout(blocks[0], dtype)),
                     1: ([K, N], [{b_stride}, 1], blocks[1], _layout(blocks[1], dtype)),
                     2: ([M, N], [{c_stride}, 1], blocks[2], _layout(blocks[2], dtype))}}
            kernel = BoundKernel({KERNEL_NAME}, grid, {{"num_warps": NUM_WARPS}}, descriptors=specs)
        """, 1)
    if split:  # the fp32 partials belong to the plan (like cuBLAS's workspace: not for concurrent streams)
        out += _block("""
            partials = torch.empty((SPLIT_K * M, N), dtype=torch.float32, device=device)
            reduce_grid = (triton.cdiv(M, REDUCE_R), triton.cdiv(N, REDUCE_C))
            reduce = BoundKernel(split_k_reduce, reduce_grid, {"num_warps": 4})
        """, 1)
    launch = ("kernel(a, b, c, partials, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, CONSUMERS,\n"
              "       NUM_WARPS, SPLIT_K)\n"
              "reduce(partials, c, EPILOGUE_OPERANDSM, N, SPLIT_K, REDUCE_R, REDUCE_C)" if split else
              "kernel(a, b, b, c, c, EPILOGUE_OPERANDSM, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES,\n"
              "       CONSUMERS, NUM_WARPS, BLOCK_N0, BLOCK_N1)" if wide else
              "kernel(a, b, c, EPILOGUE_OPERANDSM, N, K, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, CONSUMERS,\n"
              "       NUM_WARPS)")
    if g["stream_k"]:
        launch = launch[:-1] + ", partials, counters, sk_share, sk_slots)"
    if rows == "ROWS":  # the kernel's last argument under a row split
        launch = launch[:-1] + ", ROWS)"
    run = (["def run(a, b, EPILOGUE_ARGSout):"] + _run_prologue(g)
           + ["    " + line for line in launch.splitlines()]
           + _run_epilogue(g) + ["", "run.kernel = kernel  # for inspection"]
           + (["run.workspace = partials"] if split else ["run.workspace = (partials, counters)"] if g["stream_k"]
              else []) + ["return run"])
    out += "\n" + _block("\n".join(run), 1)
    out = out.replace("EPILOGUE_OPERANDS", "".join(f"{n}, " for n in epilogue_operands(g)))
    return fill_epilogue(out + "\n\n" + _ENTRY.replace("(fp16, bf16 or fp32)", "(fp16 or bf16)"), g)


# a stream-K plan's grid, shares and workspace (Triton's and Gluon's kernels divide the work the same way); the
# Gluon rendering counts arrivals per consumer of a row split
_STREAM_K_PLAN = """
    num_sms = _num_sms(device)
    grid = (num_sms,)  # every SM takes part in the stream-K phase, even with fewer tiles than SMs
    # the last num_tiles % num_sms tiles are shared by K steps: an even share per program, but no more
    # than SK_MAX_PARTS programs on one tile
    k_tiles = triton.cdiv(K, BLOCK_K)
    sk_tiles = num_tiles % num_sms
    sk_share = max(triton.cdiv(sk_tiles * k_tiles, num_sms), triton.cdiv(k_tiles, SK_MAX_PARTS), 1)
    sk_slots = triton.cdiv(k_tiles, sk_share) + 1  # the most programs whose runs can meet one tile
    partials = torch.empty(max(sk_tiles, 1) * sk_slots * BLOCK_M * BLOCK_N, dtype=torch.float32, device=device)
    counters = torch.zeros({counters}, dtype=torch.int32, device=device)
"""
_GLUON_STREAM_K_PLAN = ("\n    num_tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)"
                        + _STREAM_K_PLAN.format(counters="max(sk_tiles, 1) * CONSUMERS") + """\
    # The partial slots and the counters belong to this plan (each tile's last run resets its counter): like
    # cuBLAS's workspace, they must not serve launches running concurrently on different streams.
""")


_PAD_HELPERS = _block('''
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
''', 0)

_PLAN_HEAD = _block('''
    def _plan(a, b, EPILOGUE_ARGSout):
        """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature:
        sizes, grid, buffers and the bound kernel. Returns run(a, b, out) for every call of this signature."""
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
    SWIGLU_SPLIT
        if max(M * K, K * N, M * N) >= 2**31:
            raise ValueError(f"{M}x{N}x{K} needs 64-bit offsets; this kernel computes them in 32 bits")
        if out is not None and not (isinstance(out, torch.Tensor) and out.is_contiguous()
                                    and (tuple(out.shape), out.dtype, out.device) == ((M, N), a.dtype, a.device)):
            raise ValueError(f"out must be a contiguous {M}x{N} {a.dtype} tensor on {a.device}")
        dtype, device = a.dtype, a.device
    EPILOGUE_CHECKS

        def new_out():
            return torch.empty((M, N), dtype=dtype, device=device)

        if M == 0 or N == 0:
            return lambda a, b, EPILOGUE_ARGSout: new_out() if out is None else out
    EMPTY_K
''', 0)

_ENTRY = _block('''
    def matmul(a, b, EPILOGUE_ARGSout=None):
        """C = WHAT for row-major contiguous A[M, K] and B[K, N] of one dtype (fp16, bf16 or fp32).

        C has the inputs' dtype (accumulation is fp32) and is written into `out` when given. The checks, grid and
        buffers of a call are worked out once per argument signature (shapes, strides, dtypes, devices, 16-byte
        alignment); later calls of that signature launch the bound kernel at once.
        """
        key = (signature(a), signature(b), EPILOGUE_KEYNone if out is None else signature(out))
        run = _PLANS.get(key)
        if run is None:
            run = _PLANS.add(key, _plan(a, b, EPILOGUE_ARGSout))
        return run(a, b, EPILOGUE_ARGSout)
''', 0)


def _run_prologue(g: Mapping[str, Any]) -> list[str]:
    """The first lines of a plan's run(a, b, out): the output, and the padding copies (pad_rows)."""
    if not g["pad_rows"]:
        return ["    c = out = new_out() if out is None else out"]
    return ["    if pad_a:", "        a = copy_a(a, a_pad)",
            "    if pad_b:",
            "        if b.is_cuda and torch.cuda.is_current_stream_capturing():  # a graph replays the copy",
            "            copy_b(b, b_pad)",
            "        elif b_copied[0]() is not b or b_copied[1] != b._version:  # another B, or this one changed",
            "            b_copied[:] = [weakref.ref(b), b._version]",
            "            copy_b(b, b_pad)",
            "        b = b_pad",
            "    if pad_c:  # C in padded rows: a fresh view when returned, the plan's own buffer when copied out",
            "        c = _padded(M, N, b_pad) if out is None else c_pad",
            "    else:",
            "        c = out = new_out() if out is None else out"]


def _run_epilogue(g: Mapping[str, Any]) -> list[str]:
    if not g["pad_rows"]:
        return ["    return out"]
    return ["    if pad_c:", "        return c if out is None else copy_c(c, out)", "    return out"]


def _row_strides(g: Mapping[str, Any]) -> tuple[str, str, str]:
    """The plan's names for the row strides of A, B and C: the padded copies' under pad_rows (_descriptor_checks
    sets them), else the contiguous operands' K, N and N."""
    return ("a_stride", "b_stride", "c_stride") if g["pad_rows"] else ("K", "N", "N")


def _descriptor_specs(g: Mapping[str, Any], n_blocks: int) -> str:
    """The bound kernel's `descriptors`: position -> (shape, strides, block) of each host tensor descriptor,
    A first, then one per column block of B, then of C."""
    widths = ["BLOCK_N"] if n_blocks == 1 else ["BLOCK_N0", "BLOCK_N1"]
    a_stride, b_stride, c_stride = _row_strides(g)
    specs = [f"0: ([M, K], [{a_stride}, 1], [BLOCK_M, BLOCK_K])"]
    b_cols = "2 * N" if g.get("epilogue") and g["epilogue"].swiglu else "N"  # SwiGLU: gate columns, then up
    b_stride = b_cols if b_stride == "N" else b_stride
    specs += [f"{1 + i}: ([K, {b_cols}], [{b_stride}, 1], [BLOCK_K, {w}])" for i, w in enumerate(widths)]
    c_widths = ["BLOCK_N // 2" if g["epilogue_subtile"] else w for w in widths]
    specs += [f"{1 + n_blocks + i}: ([M, N], [{c_stride}, 1], [BLOCK_M, {w}])" for i, w in enumerate(c_widths)]
    return "{" + ", ".join(specs) + "}"


def _descriptor_checks(g: Mapping[str, Any]) -> str:
    """Plan lines that refuse operands a tensor descriptor cannot address, or plan their padding (pad_rows)."""
    aligned = _block("""
        if a.data_ptr() % 16 or b.data_ptr() % 16 or (out is not None and out.data_ptr() % 16):
            raise ValueError("tensor descriptors need A, B and out to start at 16-byte aligned addresses")
    """, 1)
    if not g["pad_rows"]:
        return _block("""
            if (K * a.element_size()) % 16 or (N * a.element_size()) % 16:
                raise ValueError(f"tensor descriptors need rows of 16-byte multiples; K={K}, N={N} in {a.dtype}")
        """, 1) + aligned
    return aligned + _block("""
        # Tensor descriptors need rows of 16-byte multiples: an operand whose rows are not is copied into the plan's
        # padded rows first, and C is computed into padded rows (the calls pay for the copies, and their timing
        # includes them). Without `out`, C is returned as a view of fresh padded rows, as torch.compile does.
        # B (a weight, in a model) is copied once: a call given the same B tensor again, unchanged by torch since
        # (its version counter), reuses the padded copy, as torch.compile pads a constant weight once. A CUDA graph
        # captures the copy with the call (B may change between replays, and no Python runs then to see it).
        pad_a, pad_b = bool((K * a.element_size()) % 16), bool((N * b.element_size()) % 16)
        pad_c = pad_b
        a_pad = _padded(M, K, a) if pad_a else None
        b_pad = _padded(K, N, b) if pad_b else None
        c_pad = _padded(M, N, a) if pad_c and out is not None else None
        a_stride = a_pad.stride(0) if pad_a else K
        b_stride = b_pad.stride(0) if pad_b else N
        c_stride = b_pad.stride(0) if pad_c else N  # C's padded rows are as wide as B's
        copy_a = _row_copier(M, K, K, a_stride) if pad_a else None
        copy_b = _row_copier(K, N, N, b_stride) if pad_b else None
        copy_c = _row_copier(M, N, c_stride, N) if pad_c else None
        b_copied = [lambda: None, -1]  # (a weak reference to the B last copied, its version then)
    """, 1)
