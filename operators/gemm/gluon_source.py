"""The module evo renders for a GEMM genome with backend=gluon (genomes/gemm_gluon.py): imports, the launch runtime,
CONFIG (the genome's constants, read by the launch plan), the Gluon GEMM pasted verbatim
(operators/gemm/gluon_split.py, then operators/gemm/gluon_kernel.py: real modules whose structure genes are
constexpr switches), the kernels the launcher binds, and the launcher (operators/gemm/launcher.py:
gluon_launcher_source: operators/gemm/host.py and gluon_plan.py pasted verbatim, and the entry).

The launcher passes each kernel the arguments its genome uses, in its own order (a second column block's
descriptors, the epilogue operands, the split-K or stream-K workspace only where they exist). Until it passes
`gemm_kernel`'s and `sum_partials`' whole parameter lists, `matmul_kernel` and `split_k_reduce` take the launcher's
arguments and call them with the genome's switches: one call each, the only genome-dependent code of the module
besides CONFIG. (They stay: the kernel a profile names is `matmul_kernel`, as the Triton rendering's.)
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from genomes.gemm_resources import column_blocks
from operators._paste import pasted_source
from operators.gemm.header import config_lines
from operators.gemm.header import summary as _summary
from operators.gemm.launcher import ENTRY_NAME, KERNEL_NAME, gluon_launcher_source

__all__ = ["gluon_source", "KERNEL_FILE", "SPLIT_FILE"]

KERNEL_FILE = Path(__file__).with_name("gluon_kernel.py")
SPLIT_FILE = Path(__file__).with_name("gluon_split.py")

_IMPORTS = """\
import operator
import weakref

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
"""


def _switches(epilogue: Any) -> dict[str, Any]:
    """The fused epilogue's constexpr switches (all off for `None`)."""
    return {"SCALE": bool(epilogue and epilogue.scale), "BIAS": bool(epilogue and epilogue.bias),
            "ACTIVATION": epilogue.activation if epilogue else None, "RESIDUAL": bool(epilogue and epilogue.residual)}


def _wrapped(head: str, items: list[str], tail: str) -> str:
    """`head` + the comma-separated `items` + `tail`, broken between items at 116 characters, continuation lines
    aligned under the first item."""
    lines, line = [], head
    for i, item in enumerate(items):
        piece = item + (", " if i < len(items) - 1 else tail)
        if len(line) + len(piece.rstrip()) > 116:
            lines.append(line.rstrip())
            line = " " * len(head)
        line += piece
    return "\n".join(lines + [line])


def _call(name: str, positional: list[str], keywords: dict[str, Any]) -> str:
    """`    name(...)`: the positional arguments, then each keyword with its value's Python literal (bare where the
    value is a _Name: the caller's parameter of that name)."""
    def literal(v: Any) -> str:
        return f'"{v}"' if isinstance(v, str) and not isinstance(v, _Name) else str(v)

    return _wrapped(f"    {name}(", positional + [f"{k}={literal(v)}" for k, v in keywords.items()], ")")


class _Name(str):
    pass


def _def(decorator: str, name: str, params: list[str], doc: str, body: str) -> str:
    return f'{decorator}\n{_wrapped(f"def {name}(", params, "):")}\n    """{doc}"""\n{body}\n'


def _entries(g: Mapping[str, Any], epilogue: Any) -> str:
    """matmul_kernel (and split_k_reduce under split-K): the launcher's parameters in its order, one call of the
    pasted kernel with the genome's switches."""
    split, wide = g["split_k"] > 1, len(column_blocks(g["BLOCK_N"])) > 1
    operands = epilogue.kernel_params().split(", ") if epilogue and epilogue.operands else []
    const = ": gl.constexpr"
    params = (["a_desc", "b_desc"] + ["b1_desc"] * wide + ["c_desc"] + ["c1_desc"] * wide
              + (["partials"] if split else operands) + ["M", "N", "K"]
              + [n + const for n in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "NUM_STAGES", "CONSUMERS",
                                     "CONSUMER_WARPS")]
              + ([f"SPLIT_K{const}"] if split else []) + ([f"BLOCK_N0{const}", f"BLOCK_N1{const}"] if wide else [])
              + (["partials", "counters", "sk_share", "sk_slots"] if g["stream_k"] else [])
              + ([f"ROWS{const}"] if g["consumer_split"] == "rows" else []))

    def given(*wanted: str, params: list[str] = params) -> list[str]:
        names = {p.split(":")[0] for p in params}
        return [w if w in names else "None" for w in wanted]

    args = (given("a_desc", "b_desc", "b1_desc", "c_desc", "c1_desc", "bias_ptr", "residual_ptr", "scale", "partials",
                  "counters") + ["M", "N", "K"] + given("sk_share", "sk_slots")
            + ["BLOCK_M", "BLOCK_N", "BLOCK_K"] + (["BLOCK_N0", "BLOCK_N1"] if wide else ["BLOCK_N", "0"])
            + ["GROUP_M"])
    keywords = {"COL_MAJOR": g["raster"] == "col",
                **{n: _Name(n) for n in ("NUM_STAGES", "CONSUMERS", "CONSUMER_WARPS")},
                "ROW_SPLIT": g["consumer_split"] == "rows", "SPLIT_K": _Name("SPLIT_K") if split else 1,
                "STREAM_K": g["stream_k"],
                **_switches(None if split else epilogue)}  # split-K: the second launch applies the epilogue
    call = _call("gemm_kernel", args, keywords)
    out = _def("@gluon.jit", KERNEL_NAME, params, "The launcher's kernel: the GEMM above for this genome.", call)
    if split:
        reduce_params = (["partials", "c_ptr"] + operands
                         + ["M", "N"] + [n + ": tl.constexpr" for n in ("SPLIT_K", "REDUCE_R", "REDUCE_C")])
        reduce_call = _call("sum_partials", ["partials", "c_ptr"]
                            + given("bias_ptr", "residual_ptr", "scale", params=reduce_params)
                            + ["M", "N", "SPLIT_K", "REDUCE_R", "REDUCE_C"], _switches(epilogue))
        out += "\n\n" + _def("@triton.jit", "split_k_reduce", reduce_params,
                             "The launcher's split-K reduction: sum_partials with this genome's epilogue.",
                             reduce_call)
    return out


def _config(g: Mapping[str, Any], epilogue: Any) -> str:
    """CONFIG: the genome's constants the launch plan reads (operators/gemm/gluon_plan.py), each with why."""
    blocks = column_blocks(g["BLOCK_N"])
    rows, unit = g["consumer_split"] == "rows", "rows" if g["raster"] == "row" else "columns"
    values = {
        "BLOCK_M": g["BLOCK_M"], "BLOCK_N": g["BLOCK_N"], "BLOCK_K": g["BLOCK_K"], "BLOCK_N0": blocks[0],
        "BLOCK_N1": blocks[1] if len(blocks) > 1 else 0, "WIDE": len(blocks) > 1, "GROUP_M": g["GROUP_M"],
        "NUM_STAGES": g["num_stages"], "CONSUMERS": g["consumers"], "NUM_WARPS": g["num_warps"], "ROW_SPLIT": rows,
        "ROWS": g["BLOCK_M"] // g["consumers"] if rows else g["BLOCK_M"], "SPLIT_K": g["split_k"],
        "STREAM_K": g["stream_k"], "PAD_ROWS": g["pad_rows"], **_switches(epilogue)}
    why = {
        "BLOCK_M": "rows of C per tile", "BLOCK_N": "columns of C per tile",
        "BLOCK_N0": "columns of the tile's first column block (a wgmma and a TMA store each)",
        "GROUP_M": f"tile-{unit} per swizzle group" if g["GROUP_M"] > 1 else "no grouping",
        "NUM_STAGES": "slots of the producer's ring of A and B tiles",
        "CONSUMERS": "MMA consumers, one warp group each, splitting every tile's rows" if rows
        else "MMA consumers: 1 on every tile, 2 on alternate tiles (ping-pong)",
        "NUM_WARPS": "warps of the first consumer (the producer's warp is added)",
        "ROW_SPLIT": "the consumers split every tile's rows",
        "ROWS": "rows of each tile per consumer (its A box and C store)",
        "SPLIT_K": "K ranges per tile: fp32 partials, then a reducing launch" if g["split_k"] > 1
        else "K ranges per tile (1: one)"}
    lines = config_lines(values, why)
    width = max(len(text) for text, _ in lines)
    return ("# the genome's constants, as the launch plan reads them (matmul_kernel below passes the kernel's own)\n"
            "CONFIG = {\n" + "".join(f"    {text.ljust(width)}  # {w}\n" for text, w in lines) + "}\n")


def gluon_source(g: Mapping[str, Any], title: str, epilogue: Any = None) -> str:
    """The whole module for Gluon genome values `g`; `title` opens its docstring (names the genome). `epilogue`
    (an operators.gemm.epilogue.Epilogue, not a gate) is applied to each tile's accumulator before its store."""
    if epilogue is not None and epilogue.gate:
        raise ValueError(f"the Gluon rendering has one accumulator per tile: no {epilogue.gate} (a gate)")
    g = {**g, "epilogue": epilogue}
    what = textwrap.fill(f"C[M, N] = A[M, K] @ B[K, N], row-major, fp32 accumulation: {_summary(g)}.", 100)
    roles = textwrap.fill(
        "Rendered with Gluon: a one-warp TMA producer fills a ring of shared-memory slots guarded by mbarriers; "
        + ("one consumer of NUM_WARPS warps runs every tile's wgmma" if g["consumers"] == 1 else
           f"{g['consumers']} one-warp-group consumers take ROWS rows each of every tile, sharing its B tile"
           if g["consumer_split"] == "rows" else "two one-warp-group consumers take alternate tiles (ping-pong)")
        + "; each tile's TMA store overlaps the next tile's main loop"
        + ("; the tiles past the grid's last full wave are shared by runs of K steps (stream-K)." if g["stream_k"]
           else "."), 100)
    args = ", ".join(["a", "b", *(epilogue.operands if epilogue else ()), "out=None"])
    call = (textwrap.fill(f"Call {ENTRY_NAME}({args}) for fp16 or bf16 operands on an sm_90 GPU; rows that are "
                          "not 16-byte multiples are copied into padded rows first (TMA needs them).", 100)
            if g["pad_rows"] else
            f"Call {ENTRY_NAME}({args}) for fp16 or bf16 operands whose rows are 16-byte multiples, on an sm_90 GPU.")
    header = f'"""{title}\n\n{what}\n{roles}\n{call}\n"""\n'
    return (header + "\n" + _IMPORTS + "\n" + runtime_source() + "\n\n" + _config(g, epilogue) + "\n\n"
            + pasted_source(SPLIT_FILE) + "\n\n" + pasted_source(KERNEL_FILE) + "\n\n" + _entries(g, epilogue)
            + "\n\n" + gluon_launcher_source(g))
