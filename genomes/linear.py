"""The decode GEMM genome: y = x @ W^T for a few rows of x, W in nn.Linear's [N, K] layout (operators/linear/).

Decode reads a weight of megabytes to multiply a handful of rows: the kernel is a stream of W from HBM, and what
decides its speed is that every SM streams (tiles of BLOCK_N rows of W times SPLIT_K slices of K make the grid),
that each program keeps enough loads in flight (BLOCK_K-wide 16-byte vectors, num_stages deep), and that the
product costs less than the load (tensor cores with x padded to 16 rows, or FMAs for one to four rows).

The rules are one table (genomes/rule_table.py), each a check and its fix, read by `violations` and `repair`.
`tiles` is 2 for SwiGLU (the gate's and the up projection's rows: two W tiles per step), `norm` says the kernel
computes its rows' RMSNorm in a prologue. Blocks wider than N or K need and more splits than K has steps run right
but waste work (soft rules): a genome stays valid for smaller problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rowwise import ELEM_BYTES, next_pow2
from genomes.rule_table import FromTable, Rule
from genomes.tile_rules import block_fits, split_has_steps

__all__ = ["LinearFamily", "block_m", "registers", "rules", "MAX_REGISTERS", "DOT_ROWS"]

MAX_REGISTERS = 240  # of the 255 a thread may have: room for addresses the estimate leaves out
DOT_ROWS = 16  # tl.dot needs 16 rows at least: x's rows are padded to it


def block_m(g: Mapping[str, Any], m: int) -> int:
    """Rows of x per program: padded to 16 (up to 64) for tl.dot, the rows rounded up to a power of two (at most 16)
    for FMAs."""
    if g["math"] == "dot":
        return max(DOT_ROWS, min(next_pow2(m), 64))
    return min(next_pow2(m), 16)


def registers(g: Mapping[str, Any], m: int, tiles: int = 1, norm: bool = False) -> int:
    """Registers per thread, estimated from the values a thread holds in the K loop: its share of the W tiles (two
    16-bit values a register) and, for FMAs, of the [BLOCK_N, BLOCK_M, BLOCK_K] product (kept whole as per-lane
    sums with reduce_k=end), for tl.dot of the accumulators; the norm prologue's sums of squares live before the loop.
    Fitted to sm_90 compiles (Triton 3.9, bf16, 4-8 warps): FMA kernels took 0.65x (end) and 0.45x (step) of their
    counted values plus a few dozen; 135-254 registers compiled without spills, the ones this puts over 240 spilled
    or came within a few registers of the 255 a thread may have."""
    threads = 32 * g["num_warps"]
    bm = block_m(g, m)
    w = tiles * g["BLOCK_N"] * g["BLOCK_K"] // threads
    if g["math"] == "dot":
        regs = w // 2 + tiles * g["BLOCK_N"] * bm // threads + 10
    else:
        product = tiles * g["BLOCK_N"] * bm * g["BLOCK_K"] // threads
        regs = int(0.65 * (w + 2 * product)) + 30 if g["reduce_k"] == "end" else int(0.45 * (w + product)) + 20
    return max(regs, bm * g["BLOCK_K"] // threads + 20) if norm else regs


def _smem(g: Mapping[str, Any], problem: Problem, tiles: int) -> int:
    """Shared memory of the pipelined K loop: num_stages buffers of the W tiles and the x tile (Triton 3.6 on an H200
    allocated 278,528 bytes for 2 stages of a 256x256 W tile and a 16x256 x tile in bf16: two buffers, not one)."""
    if g["num_stages"] <= 1:
        return 0
    bm = block_m(g, problem.dims["M"])
    return g["num_stages"] * (tiles * g["BLOCK_N"] + bm) * g["BLOCK_K"] * ELEM_BYTES[problem.dtype]


def rules(tiles: int = 1, norm: bool = False) -> tuple[Rule, ...]:
    """The family's rule table, in priority order."""

    def canonical_reduction(g, p, t):
        if g["SPLIT_K"] == 1 and g["reduction"] != "atomic":
            return "without a split there is no reduction to order: reduction=atomic"
        return None

    def tiles_reduce_in_order(g, p, t):
        # On an H100 (Triton 3.6) atomic adds of tl.dot's accumulator tiles summed wrongly (relative errors 0.06-0.5,
        # CUDA-graph replays too) where the same genomes with ordered slots, and FMA tiles with atomics, were right
        if g["SPLIT_K"] > 1 and g["math"] == "dot" and g["reduction"] == "atomic":
            return "a split tl.dot tile is reduced in ordered slots (atomic adds of its tiles summed wrongly on sm_90)"
        return None

    def canonical_reduce_k(g, p, t):
        return "tl.dot reduces over K itself: reduce_k=step" if g["math"] == "dot" and g["reduce_k"] != "step" else None

    def fix_split(fam, g, p, t):
        return fam._step_down(g, "SPLIT_K") or fam._step_down(g, "BLOCK_K")

    def fits_registers(g, p, t):
        regs = registers(g, p.dims["M"], tiles, norm)
        if regs > MAX_REGISTERS:
            return f"needs ~{regs} registers per thread (> {MAX_REGISTERS}: it would spill)"
        return None

    def fix_registers(fam, g, p, t):
        """More warps, then a narrower K step, fewer W rows, per-step reduction, tensor cores."""
        m = p.dims["M"]
        trial = dict(g)
        if (fam._step_up(trial, "num_warps") and threads_busy(trial, p, t) is None
                and registers(trial, m, tiles, norm) < registers(g, m, tiles, norm)):
            g.update(trial)
            return True
        if g["BLOCK_K"] > 64 and fam._step_down(g, "BLOCK_K"):
            return True
        if g["BLOCK_N"] > 16 and fam._step_down(g, "BLOCK_N"):
            return True
        if g["math"] == "fma" and g["reduce_k"] == "end" and fam._set(g, "reduce_k", "step"):
            return True
        if g["math"] == "fma" and fam._set(g, "math", "dot"):
            fam._set(g, "reduce_k", "step")
            return True
        return fam._step_down(g, "BLOCK_K") or fam._step_down(g, "BLOCK_N")

    def threads_busy(g, p, t):
        threads, vector = 32 * g["num_warps"], 16 // ELEM_BYTES[p.dtype]
        if g["num_warps"] > 1 and g["BLOCK_N"] * g["BLOCK_K"] < threads * vector:
            return (f"a {g['BLOCK_N']}x{g['BLOCK_K']} W tile gives {threads} threads less than one 16-byte vector "
                    f"each")
        return None

    def fix_threads(fam, g, p, t):
        return fam._step_down(g, "num_warps") or fam._step_up(g, "BLOCK_K")

    def smem_fits(g, p, t):
        smem = _smem(g, p, tiles)
        return f"pipelined loads need ~{smem} bytes of shared memory (> {t.smem_bytes})" if smem > t.smem_bytes \
            else None

    return (
        block_fits("BLOCK_N", "N", 16),
        block_fits("BLOCK_K", "K", 32),
        Rule("registers", fits_registers, fix_registers),
        split_has_steps(fix_split),
        Rule("threads_busy", threads_busy, fix_threads),
        Rule("smem_fits", smem_fits, lambda fam, g, p, t: fam._step_down(g, "num_stages")),
        Rule("tiles_reduce_in_order", tiles_reduce_in_order, lambda fam, g, p, t: fam._set(g, "reduction", "ordered")),
        Rule("canonical_reduction", canonical_reduction, lambda fam, g, p, t: fam._set(g, "reduction", "atomic")),
        Rule("canonical_reduce_k", canonical_reduce_k, lambda fam, g, p, t: fam._set(g, "reduce_k", "step")),
    )


class LinearFamily(FromTable, GenomeFamily):
    name = "linear"

    def __init__(self, overrides: Mapping[str, list[Any]] | None = None, tiles: int = 1, norm: bool = False) -> None:
        if tiles not in (1, 2):
            raise ValueError(f"tiles must be 1 or 2 (SwiGLU's gate and up rows); got {tiles!r}")
        self.tiles, self.norm = tiles, norm
        super().__init__(overrides)

    @property
    def rules(self) -> tuple[Rule, ...]:
        # made on demand, not kept: a family is pickled to the workers, and the rules are closures
        return rules(self.tiles, self.norm)

    def _genes(self) -> list[Gene]:
        return [
            PowerOfTwo("BLOCK_N", 16, 256, group="tile", doc="rows of W (output columns) per program"),
            PowerOfTwo("BLOCK_K", 32, 1024, group="tile", doc="K per step of a program's loop"),
            PowerOfTwo("SPLIT_K", 1, 64, group="split", doc="programs sharing one output tile's K (all SMs busy)"),
            Categorical("reduction", ("atomic", "ordered"), group="split",
                        doc="split partials: fp32 atomic adds into one slot, or one slot each summed in split "
                            "order by the last program to arrive (deterministic)"),
            Categorical("math", ("fma", "dot"), group="structure",
                        doc="CUDA-core FMAs over [BLOCK_N, M, BLOCK_K], or tl.dot with x's rows padded to 16"),
            Categorical("reduce_k", ("step", "end"), group="structure",
                        doc="FMA only: reduce over K every step, or keep per-lane sums to the end"),
            IntChoice("num_warps", (1, 2, 4, 8), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3, 4, 5, 6), group="launch", doc="pipelining depth of the K loop"),
            Categorical("evict_w", ("none", "evict_first"), group="cache",
                        doc="eviction hint on W (each byte read once)"),
        ]

    def base(self, **values: Any) -> dict[str, Any]:
        """FMAs over 32x256 W tiles at 4 warps, no split; updated by `values`."""
        g = {"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 1, "reduction": "atomic", "math": "fma", "reduce_k": "step",
             "num_warps": 4, "num_stages": 1, "evict_w": "none"}
        g.update(values)
        return g

    def fill_split(self, problem: Problem, target: Target, block_n: int, block_k: int, waves: int = 2) -> int:
        """The smallest split whose grid gives every SM `waves` programs or more (as many as K has steps, at most)."""
        d = problem.dims
        tiles = -(-d["N"] // block_n) * -(-d["M"] // 16)
        steps = -(-d["K"] // block_k)
        split = 1
        while tiles * split < waves * target.num_sms and split * 2 <= min(steps, 64):
            split *= 2
        return split

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """Decode seeds: W tiles of 16-128 rows, K steps of 128-512, the split that fills the GPU twice over (and
        twice that), FMAs for up to four rows and tensor cores for any, a deterministic split too."""
        m = problem.dims["M"]
        raw = []
        shapes = [(64, 128, 4, 4), (128, 128, 4, 3), (64, 256, 4, 3), (32, 256, 4, 4), (128, 64, 8, 4)]
        for bn, bk, warps, stages in shapes:
            split = self.fill_split(problem, target, bn, bk)
            raw.append(self.base(math="dot", BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                                 SPLIT_K=split))
        bn, bk = 64, 128
        raw.append(self.base(math="dot", BLOCK_N=bn, BLOCK_K=bk, num_stages=4, reduction="ordered",
                             SPLIT_K=self.fill_split(problem, target, bn, bk)))
        raw.append(self.base(math="dot", BLOCK_N=bn, BLOCK_K=bk, num_stages=4, evict_w="evict_first",
                             SPLIT_K=self.fill_split(problem, target, bn, bk, waves=4)))
        if m <= 4:
            for bn, bk, warps, stages, reduce_k in ((16, 512, 4, 1, "step"), (32, 256, 4, 1, "step"),
                                                    (64, 128, 8, 2, "step"), (32, 512, 8, 1, "step"),
                                                    (16, 256, 4, 3, "end"), (32, 256, 4, 1, "end")):
                for waves in (2, 4):
                    raw.append(self.base(BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                                         reduce_k=reduce_k, SPLIT_K=self.fill_split(problem, target, bn, bk, waves)))
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "block_n": Descriptor("block_n", lambda g, r: log2(g["BLOCK_N"]), tuple(float(x) for x in range(4, 9)),
                                  "log2(BLOCK_N)", label=labels.power_of_two),
            "block_k": Descriptor("block_k", lambda g, r: log2(g["BLOCK_K"]), tuple(float(x) for x in range(5, 11)),
                                  "log2(BLOCK_K)", label=labels.power_of_two),
            "split_k": Descriptor("split_k", lambda g, r: log2(g["SPLIT_K"]), tuple(float(x) for x in range(7)),
                                  "log2(SPLIT_K)", label=labels.power_of_two),
            "math": Descriptor("math", lambda g, r: float(g["math"] == "dot"), (0.0, 1.0), "0 FMA, 1 tl.dot",
                               label=labels.categories(("FMA", "tl.dot"))),
            "num_warps": Descriptor("num_warps", lambda g, r: log2(g["num_warps"]), tuple(float(x) for x in range(4)),
                                    "log2(warps)", label=labels.power_of_two),
            "stages": Descriptor("stages", lambda g, r: float(g["num_stages"]), tuple(float(x) for x in range(1, 7)),
                                 "num_stages"),
        }
