"""The head of a rendered GEMM module: the one-line summary of what its genome turns on (for the module's
docstring) and the CONFIG of a Triton rendering (the kernel's constexprs and launch options, each with why); a
Gluon rendering's CONFIG takes the same lines, with its own why where its genes mean otherwise."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genomes.gemm import column_blocks

__all__ = ["summary", "config", "config_lines"]

_MEMORY_TEXT = {"pointer": "pointer loads", "descriptor": "tensor descriptors (TMA)",
                "host_descriptor": "host tensor descriptors (TMA)"}


def summary(g: Mapping[str, Any]) -> str:
    parts = [f"{g['BLOCK_M']}x{g['BLOCK_N']}x{g['BLOCK_K']} tiles, {g['num_warps']} warps, {g['num_stages']} stages",
             _MEMORY_TEXT[g["memory"]],
             (f"grouped {g['raster']}-major tile order (GROUP_M={g['GROUP_M']})" if g["GROUP_M"] > 1
              else f"{g['raster']}-major tile order")]
    if g["persistent"]:
        parts.append("persistent grid, last partial wave by stream-K" if g["stream_k"] else "persistent grid")
    if g["split_k"] > 1:
        parts.append(f"split-K={g['split_k']} reduced in one launch")
    hints = [f"{k}={g[k]}" for k, off in (("loop_stages", 0), ("loop_unroll", 1)) if g[k] != off]
    if g["warp_specialize"]:
        hints.append("warp_specialize")
    if hints:
        parts.append("K loop " + ", ".join(hints))
    if g["epilogue_subtile"]:
        parts.append("subtiled epilogue")
    if g["pad_rows"]:
        parts.append("operands with rows of other than 16-byte multiples copied into padded rows")
    if g.get("epilogue"):
        parts.append(f"fused epilogue: {g['epilogue'].text}")
    return "; ".join(parts)


# the why of each CONFIG entry (operators/gemm/kernel.py's constexprs, then the launch options)
_WHY = {
    "BLOCK_M": "rows of C per program", "BLOCK_N": "columns of C per program", "BLOCK_K": "depth of one K step",
    "BLOCK_N0": "columns of the tile's first column block (tl.dot needs powers of two)",
    "BLOCK_N1": "columns of its second block (0: the tile is one block)",
    "WIDE": "a tile of two column blocks", "GROUP_M": "tile-rows (tile-columns) per swizzle group; 1: none",
    "COLUMN_MAJOR": "tiles in column-major order", "MEMORY": "how tiles are loaded and stored",
    "PERSISTENT": "one program per SM strides over the tiles",
    "STREAM_K": "the last partial wave's tiles shared by K steps",
    "SPLIT_K": "programs sharing one output tile along K", "SUBTILE": "the tile stored in two halves along N",
    "LOOP_STAGES": "prefetch depth of the K loop (None: num_stages)",
    "LOOP_UNROLL": "unroll factor of the K loop (None: not unrolled)",
    "WARP_SPECIALIZE": "the K loop's loads and dots in warps of their own",
    "ROW_ALIGN": "K and N where ALIGN_K, ALIGN_N: multiples of this many elements",
    "ALIGN_K": "K a multiple of ROW_ALIGN (the launcher checks)", "ALIGN_N": "N a multiple of ROW_ALIGN",
    "SCALE": "epilogue: C *= scale", "BIAS": "epilogue: C += bias[N]", "ACTIVATION": "epilogue: the activation",
    "SWIGLU": "epilogue: silu(A @ B_gate) * (A @ B_up), B[K, 2N]",
    "GEGLU": "epilogue: gelu_tanh(A @ B_gate) * (A @ B_up), B[K, 2N]", "RESIDUAL": "epilogue: C += residual[M, N]",
    "NUM_WARPS": "warps per program", "NUM_STAGES": "software pipeline depth of the loads feeding tl.dot",
    "PAD_ROWS": "operands with rows of other than 16-byte multiples copied into padded rows",
}


def config(g: Mapping[str, Any]) -> dict[str, Any]:
    """The CONFIG of a rendered Triton GEMM module for genome values `g` (with "epilogue", "row_align" and
    "aligned_dims" as gemm_source adds them): operators/gemm/kernel.py's constexprs, then the launch options."""
    ep = g.get("epilogue")
    blocks = column_blocks(g["BLOCK_N"])
    aligned = g.get("aligned_dims", ())
    return {
        "BLOCK_M": g["BLOCK_M"], "BLOCK_N": g["BLOCK_N"], "BLOCK_K": g["BLOCK_K"], "BLOCK_N0": blocks[0],
        "BLOCK_N1": blocks[1] if len(blocks) > 1 else 0, "WIDE": len(blocks) > 1, "GROUP_M": g["GROUP_M"],
        "COLUMN_MAJOR": g["raster"] == "col", "MEMORY": g["memory"], "PERSISTENT": g["persistent"],
        "STREAM_K": g["persistent"] and g["stream_k"], "SPLIT_K": g["split_k"], "SUBTILE": g["epilogue_subtile"],
        "LOOP_STAGES": g["loop_stages"] or None, "LOOP_UNROLL": g["loop_unroll"] if g["loop_unroll"] > 1 else None,
        "WARP_SPECIALIZE": g["warp_specialize"], "ROW_ALIGN": g.get("row_align", 1) if aligned else 1,
        "ALIGN_K": "K" in aligned, "ALIGN_N": "N" in aligned, "SCALE": bool(ep and ep.scale),
        "BIAS": bool(ep and ep.bias), "ACTIVATION": ep.activation or "" if ep else "",
        "SWIGLU": bool(ep and ep.swiglu), "GEGLU": bool(ep and ep.geglu), "RESIDUAL": bool(ep and ep.residual),
        "NUM_WARPS": g["num_warps"], "NUM_STAGES": g["num_stages"], "PAD_ROWS": g["pad_rows"],
    }


def config_lines(values: Mapping[str, Any], why: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(`"NAME": value,`, why) for each entry of a CONFIG, as the module template writes them; `why` names the
    entries whose why differs from the Triton rendering's (or that it has not)."""
    whys = {**_WHY, **(why or {})}
    return [(f"{name!r}: {value!r},", whys[name]) for name, value in values.items()]
