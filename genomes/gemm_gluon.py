"""The Gluon backend of the GEMM genome: which genomes it renders, and how a genome is moved into its region.

`backend=gluon` renders the kernel with Gluon (triton.experimental.gluon) instead of `tl`: a persistent Hopper
kernel whose roles are real warp groups, a one-warp TMA producer feeding a ring of `num_stages` shared-memory
buffers through mbarriers, and `consumers` MMA warp groups issuing asynchronous wgmma: one consumer of
`num_warps` warps on each tile (cooperative: its warp groups split the tile's rows), or two consumers of one warp
group each on alternate tiles (ping-pong: one's epilogue runs under the other's main loop). Register budgets
move between the roles (setmaxnreg). What Triton's `tl` cannot express on Hopper; see operators/gemm/gluon_source.py.
With `split_k` > 1 a work item is one K range of one tile (long K, few tiles): its fp32 partial leaves from
registers and a second launch sums the partials (and applies the fused epilogue).

A Gluon genome holds the structure genes of the Triton rendering at fixed values (GLUON_FIXED: its memory
path is always host tensor descriptors, its grid always persistent), so one kernel has one genome. The tile,
launch and swizzle genes keep their meaning. Not rendered with Gluon (refused, named): other targets than sm_90
(wgmma is Hopper's), fp32 (tf32 wgmma), rows that are not 16-byte multiples (TMA), SwiGLU (two accumulators per
tile). The wide tiles (BLOCK_N 96 and 192, which quantise better on 132 SMs) are two column blocks (64 + 32,
128 + 64: Gluon tensors have power-of-two shapes), each its own accumulator, wgmma and TMA store on one A tile.
Other fused epilogues (scale, bias, activation, residual) are applied to the accumulator in registers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target

__all__ = ["GLUON_FIXED", "gluon_smem", "gluon_violations", "gluon_repair"]

# the structure genes a Gluon genome holds fixed (its structure is the rendering's own)
GLUON_FIXED = {"memory": "host_descriptor", "persistent": True, "stream_k": False,
               "warp_specialize": False, "loop_stages": 0, "loop_unroll": 1, "epilogue_subtile": False,
               "pad_rows": False}
_ELEM_BYTES = {"fp16": 2, "bf16": 2}
_MIN_ROWS_PER_WARP = 16  # a wgmma warp group owns 64 rows (16 per warp): BLOCK_M >= 16 * consumer warps


def gluon_smem(g: Mapping[str, Any], dtype: str) -> int:
    """Shared memory of the rendering: the operand ring (num_stages A and B tiles) plus one output staging tile
    per consumer (its TMA store overlaps the next tile's main loop; split-K stores its fp32 partials from
    registers and stages nothing), plus the ring's mbarriers."""
    e = _ELEM_BYTES.get(dtype, 4)
    ring = g["num_stages"] * (g["BLOCK_M"] * g["BLOCK_K"] + g["BLOCK_K"] * g["BLOCK_N"]) * e
    staging = g["consumers"] * g["BLOCK_M"] * g["BLOCK_N"] * e if g["split_k"] == 1 else 0
    return ring + staging + 16 * g["num_stages"]


def gluon_violations(g: Mapping[str, Any], problem: Problem, target: Target, refusal: str,
                     unaligned: tuple[str, ...]) -> list[str]:
    """Why the Gluon rendering cannot run `problem` on `target` (empty when it can). `refusal` says why the
    family's kernel (a fused epilogue) is not rendered with Gluon ("" when it is); `unaligned` names the row
    lengths that are not 16-byte multiples."""
    out = []
    if target.arch != 90:
        out.append(f"the Gluon rendering is Hopper's (wgmma, sm_90), not sm_{target.arch}")
    if target.interpreted:
        out.append("the Gluon rendering does not run in Triton's CPU interpreter")
    if problem.dtype not in _ELEM_BYTES:
        out.append(f"the Gluon rendering takes fp16 and bf16, not {problem.dtype}")
    if unaligned:
        out.append(f"the Gluon rendering needs rows of 16-byte multiples (TMA); {', '.join(unaligned)} are not")
    if refusal:
        out.append(f"the Gluon rendering {refusal}")
    out += [f"the Gluon rendering holds {name}={value}" for name, value in GLUON_FIXED.items() if g[name] != value]
    if g["num_warps"] not in (4, 8):
        out.append(f"a Gluon consumer is one or two warp groups: num_warps=4 or 8, not {g['num_warps']}")
    if g["split_k"] * problem.dims["M"] * problem.dims["N"] >= 2**31:
        out.append(f"split_k={g['split_k']} partials of {problem.dims['M']}x{problem.dims['N']} need 64-bit offsets")
    if g["consumers"] == 2 and g["num_warps"] != 4:
        out.append("two Gluon consumers (ping-pong) are one warp group each: num_warps=4")
    if g["BLOCK_M"] < _MIN_ROWS_PER_WARP * g["num_warps"]:
        out.append(f"BLOCK_M={g['BLOCK_M']} is under the {_MIN_ROWS_PER_WARP * g['num_warps']} rows that "
                   f"{g['num_warps']} wgmma warps own")
    return out


def gluon_repair(family: Any, g: dict[str, Any], problem: Problem, target: Target, refusal: str,
                 unaligned: tuple[str, ...]) -> None:
    """Move `g` (backend=gluon) into the Gluon region in place, with `family`'s moves; back to the Triton
    rendering (one consumer) when the problem or target rules Gluon out."""
    # (M up to 32: a 64-row wgmma tile over so few rows loses to Triton's smaller tiles)
    cannot = (target.arch != 90 or target.interpreted or problem.dtype not in _ELEM_BYTES or bool(unaligned)
              or bool(refusal) or problem.dims["M"] <= 32)
    if not cannot:
        for name, value in GLUON_FIXED.items():
            cannot = cannot or not family._set(g, name, value)
    if not cannot and g["consumers"] == 2 and not family._set(g, "num_warps", 4):
        cannot = not family._set(g, "consumers", 1)
    if not cannot and g["num_warps"] < 4:
        cannot = not family._set(g, "num_warps", 4)
    while not cannot and g["BLOCK_M"] < _MIN_ROWS_PER_WARP * g["num_warps"]:
        if not (g["num_warps"] == 8 and family._set(g, "num_warps", 4)) and not family._step_up(g, "BLOCK_M"):
            cannot = True
    if cannot:
        family._set(g, "backend", "triton")
        family._set(g, "consumers", 1)
