"""The head of a rendered GEMM module: the one-line summary of what its genome turns on (for the module's
docstring) and the table of its constants, each with why it has its value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from genomes.gemm import column_blocks

__all__ = ["summary", "constants", "constants_table"]

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


def constants(g: Mapping[str, Any]) -> str:
    rows = [("BLOCK_M", g["BLOCK_M"], "rows of C per program"),
            ("BLOCK_N", g["BLOCK_N"], "columns of C per program"),
            ("BLOCK_K", g["BLOCK_K"], "depth of one K step")]
    blocks = column_blocks(g["BLOCK_N"])
    if len(blocks) > 1:
        rows += [(f"BLOCK_N{i}", w, f"columns of C in block {i} of the tile (tl.dot needs powers of two)")
                 for i, w in enumerate(blocks)]
    if g["GROUP_M"] > 1:
        unit = "rows" if g["raster"] == "row" else "columns"
        rows.append(("GROUP_M", g["GROUP_M"], f"tile-{unit} per swizzle group"))
    if g.get("aligned_dims"):
        dims = " and ".join(g["aligned_dims"])
        rows.append(("ROW_ALIGN", g["row_align"], f"{dims} of the problem: multiples of this many elements"))
    if g["loop_stages"] > 0:
        rows.append(("LOOP_STAGES", g["loop_stages"], "prefetch depth of the K loop"))
    if g["loop_unroll"] > 1:
        rows.append(("LOOP_UNROLL", g["loop_unroll"], "unroll factor of the K loop"))
    if g["split_k"] > 1:
        rows.append(("SPLIT_K", g["split_k"], "programs sharing one output tile along K"))
    rows += [("NUM_WARPS", g["num_warps"], "warps per program"),
             ("NUM_STAGES", g["num_stages"], "software pipeline depth of the loads feeding tl.dot")]
    return constants_table(rows)


def constants_table(rows: list[tuple[str, Any, str]]) -> str:
    """`NAME = value  # why` lines, the comments aligned, one per (name, value, why)."""
    width = max(len(f"{n} = {v}") for n, v, _ in rows)
    return "".join(f"{f'{n} = {v}':<{width}}  # {why}\n" for n, v, why in rows)
