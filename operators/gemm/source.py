"""Triton source for one GEMM genome, assembled from small template pieces.

Each genome feature contributes its own lines (persistent tile loop, tensor descriptors, split-K
reduction, subtiled epilogue, K-loop hints), so a rendered module holds only the code its genome turns on
and reads like a hand-written kernel. The kernel accepts any M, N, K; the genome decides how it runs.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from evo.launch import runtime_source
from genomes.gemm import DESCRIPTOR_MEMORY, column_blocks
from operators._template import block as _block
from operators._template import wrap as _wrap
from operators.gemm.header import constants as _constants
from operators.gemm.header import summary as _summary
from operators.gemm.launcher import ENTRY_NAME, KERNEL_NAME, constexpr_names, launcher_source

__all__ = ["gemm_source", "tile_coords_source", "KERNEL_NAME", "ENTRY_NAME"]


# -- program-id swizzle -----------------------------------------------------------------------------------
def tile_coords_source(g: Mapping[str, Any]) -> str:
    """The `tile_coords` function of the genome's program-id swizzle (tile id -> pid_m, pid_n)."""
    grouped = g["GROUP_M"] > 1
    params = "tile_id, num_pid_m, num_pid_n" + (", GROUP_M: tl.constexpr" if grouped else "")
    if g["raster"] == "row" and grouped:
        doc = "Grouped row-major order: GROUP_M tile-rows walk N together, so their B tiles are reused from L2."
        body = """
            tiles_per_group = GROUP_M * num_pid_n
            first_m = (tile_id // tiles_per_group) * GROUP_M
            group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
            local = tile_id % tiles_per_group
            pid_m = first_m + local % group_rows
            pid_n = local // group_rows
        """
    elif g["raster"] == "col" and grouped:
        doc = "Grouped column-major order: GROUP_M tile-columns walk M together, so their A tiles are reused."
        body = """
            tiles_per_group = GROUP_M * num_pid_m
            first_n = (tile_id // tiles_per_group) * GROUP_M
            group_cols = tl.minimum(num_pid_n - first_n, GROUP_M)
            local = tile_id % tiles_per_group
            pid_n = first_n + local % group_cols
            pid_m = local // group_cols
        """
    elif g["raster"] == "row":
        doc = "Row-major tile order."
        body = """
            pid_m = tile_id // num_pid_n
            pid_n = tile_id % num_pid_n
        """
    else:
        doc = "Column-major tile order."
        body = """
            pid_n = tile_id // num_pid_m
            pid_m = tile_id % num_pid_m
        """
    return (f"@triton.jit\ndef tile_coords({params}):\n    \"\"\"{doc}\"\"\"\n" + _block(body, 1)
            + "    return pid_m, pid_n\n")


def _coords_call(g: Mapping[str, Any], tile: str) -> str:
    extra = ", GROUP_M" if g["GROUP_M"] > 1 else ""
    return f"pid_m, pid_n = tile_coords({tile}, num_pid_m, num_pid_n{extra})"


# -- main loop ------------------------------------------------------------------------------------------
def _k_range(g: Mapping[str, Any], lo: str, hi: str) -> str:
    hints = []
    if g["loop_stages"] > 0:
        hints.append("num_stages=LOOP_STAGES")
    if g["loop_unroll"] > 1:
        hints.append("loop_unroll_factor=LOOP_UNROLL")
    if g["warp_specialize"]:
        hints.append("warp_specialize=True")
    if hints:
        return f"tl.range({lo}, {hi}, {', '.join(hints)})"
    return f"range({lo}, {hi})"


def _blocks(g: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(name suffix, width constant, column offset within the tile) of each column block of the tile: one
    block named plainly (acc, b, b_desc), or two (acc0 and acc1, ...) for a wide BLOCK_N."""
    if len(column_blocks(g["BLOCK_N"])) == 1:
        return [("", "BLOCK_N", "")]
    return [("0", "BLOCK_N0", ""), ("1", "BLOCK_N1", " + BLOCK_N0")]


def _loop_blocks(g: Mapping[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(accumulator suffix, width, column offset within the tile, B descriptor suffix, column shift in B) of
    each B tile a K step reads: the tile's column blocks, or for SwiGLU the gate's block and the up
    projection's, N columns further along B's [K, 2N] rows, each with its own accumulator."""
    if _swiglu(g):
        return [("g", "BLOCK_N", "", "", ""), ("u", "BLOCK_N", "", "", " + N")]
    return [(s, w, o, s, "") for s, w, o in _blocks(g)]


def _swiglu(g: Mapping[str, Any]) -> bool:
    return bool(g.get("epilogue") and g["epilogue"].swiglu)


def _main_loop(g: Mapping[str, Any], depth: int, lo: str = "0", hi: str = "k_tiles") -> str:
    """acc = the sum over K steps [lo, hi) of A's and B's tiles at (pid_m, pid_n) (acc0 and acc1 for a tile
    of two column blocks; for SwiGLU, silu of the gate's sum times the up projection's)."""
    blocks = _loop_blocks(g)
    zeros = "".join(f"acc{s} = tl.zeros((BLOCK_M, {w}), dtype=tl.float32)\n" for s, w, _, _, _ in blocks)
    dots = "".join(f"    acc{s} = tl.dot(a, b{s}, acc{s})\n" for s, _, _, _, _ in blocks)
    gate = "acc = accg * tl.sigmoid(accg) * accu  # SwiGLU: silu(gate) * up\n" if _swiglu(g) else ""
    if g["memory"] in DESCRIPTOR_MEMORY:
        loads = "".join(f"    b{s} = b_desc{d}.load([ki * BLOCK_K, off_n{o}{shift}])\n" for s, _, o, d, shift in blocks)
        head = f"for ki in {_k_range(g, lo, hi)}:\n    a = a_desc.load([off_m, ki * BLOCK_K])\n"
        return _block("off_m = pid_m * BLOCK_M\noff_n = pid_n * BLOCK_N\n" + zeros + head + loads + dots + gate,
                      depth)
    # B's rows hold 2N columns for SwiGLU (gate, then up)
    ldb = "2 * N" if _swiglu(g) else "N"
    # the column offsets of each block start at a multiple of the lowest set bit of BLOCK_N: that is the hint
    align = blocks[-1][1]
    offsets = "".join(f"offs_bn{s} = pid_n * BLOCK_N{o} + tl.arange(0, {w})\n" for s, w, o, _, _ in blocks)
    hints = "".join(f"offs_bn{s} = tl.max_contiguous(tl.multiple_of(tl.where(offs_bn{s} < N, offs_bn{s}, 0), "
                    f"{align}), {w})\n" for s, w, _, _, _ in blocks)
    ptrs = "".join(f"b_ptrs{s} = b_ptr + offs_k[:, None] * {ldb} + offs_bn{s}[None, :]{shift}\n"
                   for s, _, _, _, shift in blocks)
    full = "".join(f"    b{s} = tl.load(b_ptrs{s} + ki * BLOCK_K * {ldb})\n" for s, _, _, _, _ in blocks)
    tail = "".join(f"    b{s} = tl.load(b_ptrs{s} + k_full * BLOCK_K * {ldb}, mask=offs_k[:, None] < k_left, "
                   "other=0.0)\n" for s, _, _, _, _ in blocks)
    # the unmasked loop is the whole K range unless a split (lo, hi) is given
    end = "k_full" if (lo, hi) == ("0", "k_tiles") else f"tl.minimum({hi}, k_full)"
    return _block(
        "offs_am = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n" + offsets
        + "# Rows and columns past the edge read row/column 0 instead (their results are never stored), so\n"
        + "# loads are masked along K only, and only in the last K step when K is not a multiple of BLOCK_K;\n"
        + "# the hints let the compiler vectorize them.\n"
        + "offs_am = tl.max_contiguous(tl.multiple_of(tl.where(offs_am < M, offs_am, 0), BLOCK_M), BLOCK_M)\n"
        + hints + "a_ptrs = a_ptr + offs_am[:, None] * K + offs_k[None, :]\n" + ptrs + zeros
        + "k_full = K // BLOCK_K  # K steps that need no mask\n"
        + f"for ki in {_k_range(g, lo, end)}:\n    a = tl.load(a_ptrs + ki * BLOCK_K)\n" + full + dots
        + f"if {hi} > k_full:  # the last K step is partial: the peeled, masked tail\n"
        + "    k_left = K - k_full * BLOCK_K\n"
        + "    a = tl.load(a_ptrs + k_full * BLOCK_K, mask=offs_k[None, :] < k_left, other=0.0)\n" + tail
        + dots + gate, depth)


# -- epilogue -------------------------------------------------------------------------------------------
def _store_c(g: Mapping[str, Any], tile: str, depth: int) -> str:
    """Convert the fp32 tile held in `tile` to C's dtype and store it at (pid_m, pid_n)."""
    host_c = g["memory"] == "host_descriptor"
    c_dtype = f"c_desc{_blocks(g)[0][0]}.dtype" if host_c else "c_ptr.dtype.element_ty"
    pieces = []
    if g["epilogue_subtile"]:
        pieces.append(f"""
            # Subtiled epilogue: the tile leaves in two halves along N (half the staging buffer).
            halves = tl.permute(tl.reshape({tile}, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            {tile}_left, {tile}_right = tl.split(halves)
        """)
        parts = [(f"{tile}_left", "pid_n * BLOCK_N", "BLOCK_N // 2"),
                 (f"{tile}_right", "pid_n * BLOCK_N + BLOCK_N // 2", "BLOCK_N // 2")]
    else:
        parts = [(f"{tile}{s}", f"pid_n * BLOCK_N{o}", w) for s, w, o in _blocks(g)]
    if g.get("epilogue"):
        pieces.append(_epilogue(g["epilogue"], parts))
    if g["memory"] in DESCRIPTOR_MEMORY and g["epilogue_subtile"]:
        pieces.append(f"""
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], {tile}_left.to({c_dtype}))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], {tile}_right.to({c_dtype}))
        """)
    elif g["memory"] in DESCRIPTOR_MEMORY:
        pieces += [f"c_desc{s}.store([pid_m * BLOCK_M, pid_n * BLOCK_N{o}], {tile}{s}.to({c_dtype}))"
                   for s, _, o in _blocks(g)]
    elif g["epilogue_subtile"]:
        pieces.append(f"""
            offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N // 2)
            c_ptrs = c_ptr + offs_cm[:, None] * N + offs_cn[None, :]
            row_ok = offs_cm[:, None] < M
            tl.store(c_ptrs, {tile}_left.to(c_ptr.dtype.element_ty), mask=row_ok & (offs_cn[None, :] < N))
            tl.store(c_ptrs + BLOCK_N // 2, {tile}_right.to(c_ptr.dtype.element_ty),
                     mask=row_ok & (offs_cn[None, :] + BLOCK_N // 2 < N))
        """)
    elif len(_blocks(g)) == 1:
        pieces.append(f"""
            offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            c_ptrs = c_ptr + offs_cm[:, None] * N + offs_cn[None, :]
            c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
            tl.store(c_ptrs, {tile}.to(c_ptr.dtype.element_ty), mask=c_mask)
        """)
    else:
        pieces.append("offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\nrow_ok = offs_cm[:, None] < M")
        pieces += [f"offs_cn{s} = pid_n * BLOCK_N{o} + tl.arange(0, {w})\n"
                   f"tl.store(c_ptr + offs_cm[:, None] * N + offs_cn{s}[None, :], "
                   f"{tile}{s}.to(c_ptr.dtype.element_ty),\n"
                   f"         mask=row_ok & (offs_cn{s}[None, :] < N))" for s, w, o in _blocks(g)]
    return "".join(_block(piece, depth) for piece in pieces)


def _epilogue(ep: Any, parts: list[tuple[str, str, str]]) -> str:
    """The fused epilogue (operators/gemm/epilogue.py) applied to each fp32 piece (name, first column, width) of the
    tile before it is converted and stored."""
    code = "".join(ep.triton_lines(var, cols, width) for var, cols, width in parts)
    if not code:
        return ""
    rows = "offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)\n" if ep.residual else ""
    return f"# Fused epilogue: {ep.text}, in fp32 before the cast.\n" + rows + code


def _reduce_partials(g: Mapping[str, Any], first_slot: str, part: str, parts: str, counter: str, depth: int) -> str:
    """Publish `acc` as partial `part` of the `parts` that make one output tile (slots from `first_slot` on,
    arrival counter `counter`); the program that arrives last sums them in part order (deterministic) and
    writes C, then resets the counter so that the next launch needs no zeroing pass."""
    return _block(f"""
        offs_tm = tl.arange(0, BLOCK_M)
        offs_tn = tl.arange(0, BLOCK_N)
        slots = ws_ptr + ({first_slot}).to(tl.int64) * (BLOCK_M * BLOCK_N)
        slots += offs_tm[:, None] * BLOCK_N + offs_tn[None, :]
        tl.store(slots + ({part}) * (BLOCK_M * BLOCK_N), acc)
        # One thread issues the atomic: the barrier puts every thread's partial before it, and acq_rel makes
        # those writes visible to the program that reads them after its own increment.
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + {counter}, 1, sem="acq_rel", scope="gpu")
        if arrived == {parts} - 1:
            # .cg reads L2 directly: this SM's L1 must not serve lines other programs have since rewritten
            total = tl.load(slots, cache_modifier=".cg")
            for s in range(1, {parts}):
                total += tl.load(slots + s * (BLOCK_M * BLOCK_N), cache_modifier=".cg")
    """, depth) + _store_c(g, "total", depth + 1) + _block(
        f'tl.atomic_xchg(counter_ptr + {counter}, 0, sem="relaxed", scope="gpu")', depth + 1)


def _stream_k_phase(g: Mapping[str, Any]) -> str:
    """The tiles left after the persistent grid's last full wave, shared by K steps (stream-K)."""
    return _block(f"""
        # Stream-K: the last num_tiles % num_sms tiles would leave SMs idle as a partial wave; instead their
        # K steps, laid end to end, are dealt out in runs of sk_share steps: program p takes steps
        # [p * sk_share, (p + 1) * sk_share), crossing from one tile into the next as it goes.
        sk_steps = (num_tiles - dp_tiles) * k_tiles
        run_lo = tl.program_id(0) * sk_share
        run_hi = tl.minimum(run_lo + sk_share, sk_steps)
        for sk_tile in range(run_lo // k_tiles, tl.cdiv(run_hi, k_tiles)):  # none when run_lo >= sk_steps
            k_lo = tl.maximum(run_lo - sk_tile * k_tiles, 0)
            k_hi = tl.minimum(run_hi - sk_tile * k_tiles, k_tiles)
            {_coords_call(g, "dp_tiles + sk_tile")}
    """, 1) + _main_loop(g, 2, "k_lo", "k_hi") + _block("""
        # the programs whose runs cover this tile, in K order; a tile covered by one program is stored directly
        first = sk_tile * k_tiles // sk_share
        parts = ((sk_tile + 1) * k_tiles - 1) // sk_share - first + 1
        if parts == 1:
    """, 2) + _store_c(g, "acc", 3) + _block("else:", 2) + _reduce_partials(
        g, "sk_tile * sk_slots", "tl.program_id(0) - first", "parts", "sk_tile", 3)


# -- kernel ---------------------------------------------------------------------------------------------
def _kernel(g: Mapping[str, Any]) -> str:
    split, stream_k = g["split_k"] > 1, g["persistent"] and g["stream_k"]
    if g["memory"] == "host_descriptor":
        b_descs = ", ".join(f"b_desc{s}" for s, _, _ in _blocks(g))
        c_descs = ", ".join(f"c_desc{s}" for s, _, _ in _blocks(g))
        params = [f"a_desc, {b_descs}, {c_descs},  # host tensor descriptors (TMA) of A[M, K], B[K, N], C[M, N]"]
    else:
        params = ["a_ptr, b_ptr, c_ptr,  # A[M, K], B[K, N], C[M, N]: row-major, contiguous"]
    if g.get("epilogue") and g["epilogue"].operands:
        params.append(f"{g['epilogue'].kernel_params()},  # the epilogue's operands")
    if split or stream_k:
        params.append("ws_ptr, counter_ptr,  # fp32 partial-tile slots, per-tile arrival counters")
    params.append("M, N, K, num_sms," if g["persistent"] else "M, N, K,")
    if stream_k:
        params.append("sk_share, sk_slots,  # K steps per program in the stream-K phase, partial slots per tile")
    params += _wrap([f"{c}: tl.constexpr" for c in constexpr_names(g)])
    # the stream-K sizes depend on the SM count: not specialized, one compiled kernel serves any GPU
    jit = '@triton.jit(do_not_specialize=["sk_share", "sk_slots"])' if stream_k else "@triton.jit"
    out = f"{jit}\ndef {KERNEL_NAME}(\n" + "".join(f"    {p}\n" for p in params) + "):\n"
    if g.get("aligned_dims"):
        dims = " and ".join(g["aligned_dims"])
        out += _block(f"""
            # {dims}: multiples of ROW_ALIGN here (the launcher checks). Triton learns only divisibility by 16
            # from integer arguments; restating it lets 16-byte loads and stores of whole rows vectorize.
        """, 1) + "".join(_block(f"{d} = {d} // ROW_ALIGN * ROW_ALIGN", 1) for d in g["aligned_dims"])
    out += _block("""
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        k_tiles = tl.cdiv(K, BLOCK_K)
    """, 1)
    if g["memory"] == "descriptor":
        c_block = "BLOCK_N // 2" if g["epilogue_subtile"] else "BLOCK_N"
        out += _block("""
            # In-kernel tensor descriptors (TMA on Hopper): out-of-bounds reads return zeros and
            # out-of-bounds writes are dropped, so ragged edges need no masks.
            a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        """, 1)
        ldb = "2 * N" if _swiglu(g) else "N"  # SwiGLU's B holds the gate's N columns, then the up projection's
        b_layout = f"shape=[K, {ldb}], strides=[{ldb}, 1]"
        for s, w, _ in _blocks(g):
            out += _block(f"""
                b_desc{s} = tl.make_tensor_descriptor(b_ptr, {b_layout}, block_shape=[BLOCK_K, {w}])
                c_desc{s} = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                                   block_shape=[BLOCK_M, {c_block if len(_blocks(g)) == 1 else w}])
            """, 1)
    elif g["memory"] == "pointer":
        out += _block("offs_k = tl.arange(0, BLOCK_K)", 1)
    if g["persistent"]:
        out += _block("""
            # Persistent grid: one program per SM strides over the tiles; flatten=True lets the compiler
            # pipeline the loads of the next tile under the epilogue of the current one. num_sms is a
            # runtime argument so that one compiled kernel serves every GPU model.
            num_tiles = num_pid_m * num_pid_n
        """, 1)
        if stream_k:
            out += _block("""
                # whole waves here; the tiles of the last partial wave go to the stream-K phase below
                dp_tiles = num_tiles - num_tiles % num_sms
            """, 1)
        out += _block(f"""
            # The epilogue derives its tile from a second counter (as upstream does), so no value has to
            # live across the flattened loop from the loads to the stores.
            tile_id_c = tl.program_id(0) - num_sms
            for tile_id in tl.range(tl.program_id(0), {"dp_tiles" if stream_k else "num_tiles"}, num_sms, flatten=True):
                {_coords_call(g, "tile_id")}
        """, 1)
        out += _main_loop(g, 2)
        out += _block(f"""
            tile_id_c += num_sms
            {_coords_call(g, "tile_id_c")}
        """, 2)
        out += _store_c(g, "acc", 2)
        if stream_k:
            out += _stream_k_phase(g)
    elif split:
        out += _block(f"""
            # SPLIT_K programs share each output tile; split s takes K steps
            # [s * k_tiles // SPLIT_K, (s + 1) * k_tiles // SPLIT_K): balanced, none empty when SPLIT_K <= k_tiles.
            tile_id = tl.program_id(0) // SPLIT_K
            split = tl.program_id(0) % SPLIT_K
            {_coords_call(g, "tile_id")}
            k_lo = split * k_tiles // SPLIT_K
            k_hi = (split + 1) * k_tiles // SPLIT_K
        """, 1)
        out += _main_loop(g, 1, "k_lo", "k_hi")
        out += _block("# Publish this program's fp32 partial tile; the tile's last program to arrive writes C.", 1)
        out += _reduce_partials(g, "tile_id * SPLIT_K", "split", "SPLIT_K", "tile_id", 1)
    else:
        out += _block(_coords_call(g, "tl.program_id(0)"), 1)
        out += _main_loop(g, 1)
        out += _store_c(g, "acc", 1)
    return out


# -- module ---------------------------------------------------------------------------------------------
def gemm_source(g: Mapping[str, Any], title: str, row_align: int = 1, aligned_dims: tuple[str, ...] = (),
                epilogue: Any = None) -> str:
    """The whole module for genome values `g`; `title` opens its docstring (names the genome).

    `aligned_dims` (of "K", "N") are row strides known to be multiples of `row_align` elements for the problem
    at hand though not of 16 (what Triton detects by itself); pointer kernels then state it for vectorization.
    `epilogue` (an operators.gemm.epilogue.Epilogue) is fused into the store; its operands follow B in the entry.
    """
    if aligned_dims and (row_align <= 1 or g["memory"] != "pointer"):
        raise ValueError("aligned_dims needs row_align > 1 and pointer memory")
    g = {**g, "row_align": row_align, "aligned_dims": tuple(aligned_dims), "epilogue": epilogue}
    product = "silu(A @ B[:, :N]) * (A @ B[:, N:]) for A[M, K], B[K, 2N]" if _swiglu(g) else "A[M, K] @ B[K, N]"
    what = textwrap.fill(f"C[M, N] = {product}, row-major, fp32 accumulation: {_summary(g)}.", 100)
    args = ", ".join(["a", "b", *(epilogue.operands if epilogue else ()), "out=None"])
    header = (f'"""{title}\n\n{what}\nCall {ENTRY_NAME}({args}) for any M, N, K whose operands have '
              'fewer than 2**31 elements.\n"""\n')
    imports = (("import weakref\n\n" if g["pad_rows"] else "")  # padded B copied once per B tensor (launcher)
               + "import torch\nimport triton\nimport triton.language as tl\n")
    return (header + "\n" + imports + "\n" + runtime_source() + "\n\n" + _constants(g) + "\n\n"
            + tile_coords_source(g) + "\n\n" + _kernel(g) + "\n\n" + launcher_source(g))
