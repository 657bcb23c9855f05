"""The Mixture-of-Experts expert GEMM genomes (operators/moe/): `moe_gate_up` (every expert's gate and up projections
with SwiGLU) and `moe_down` (the down projection, routing weights applied, each token's top-k outputs combined).

Problems are (T, E, TOPK, N, K): T tokens routed to TOPK of E experts, each expert's projection [N, K]. At decode (1-16
tokens) an expert sees a handful of rows and the kernel streams the weights of the experts hit: what matters is that
every SM streams (BLOCK_N rows of a weight per work item) with the gathered tokens on the MMA's narrow side (swap_ab,
BLOCK_M 16). At prefill an expert sees hundreds of rows and the kernel is a grouped GEMM: tiles, the work order (which
work items run side by side and share x rows or weight tiles in L2) and the pipelining decide.

The rules are one table (genomes/rule_table.py), each a check and its fix, read by `violations` and `repair`. Blocks
wider than the problem needs are soft rules: a genome stays valid for smaller problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Boolean, Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rowwise import ELEM_BYTES, next_pow2
from genomes.rule_table import FromTable, Rule
from genomes.tile_rules import block_fits

__all__ = ["MoEGateUpFamily", "MoEDownFamily", "registers", "smem_bytes", "rules", "MAX_REGISTERS", "DIMS",
           "programs", "routes_in_kernel", "ROUTE_IN_KERNEL_SLOTS", "ROUTE_IN_KERNEL_CELLS"]

DIMS = ("T", "E", "TOPK", "N", "K")
MAX_REGISTERS = 240  # of the 255 a thread may have: room for addresses and the routing the estimate leaves out
# what a program sorts itself with routing=in_kernel (operators/moe/kernel.py's plan falls back to torch beyond)
ROUTE_IN_KERNEL_SLOTS = 64
ROUTE_IN_KERNEL_CELLS = 8192


def routes_in_kernel(problem: Problem) -> bool:
    """Whether a program can sort the problem's T * TOPK slots over its experts itself."""
    d = problem.dims
    slots = d["T"] * d["TOPK"]
    return slots <= ROUTE_IN_KERNEL_SLOTS and next_pow2(d["E"] + 1) * next_pow2(slots) <= ROUTE_IN_KERNEL_CELLS


def registers(g: Mapping[str, Any], dtype: str, tiles: int) -> int:
    """Registers per thread, estimated from what a thread holds in the K loop: its share of the fp32 accumulators
    (`tiles` of them: gate and up), of the operand tiles on their way to the MMA (two 16-bit values a register), and
    a few dozen for addresses and the work item's routing."""
    threads = 32 * g["num_warps"]
    acc = tiles * g["BLOCK_M"] * g["BLOCK_N"] // threads
    operands = (g["BLOCK_M"] + tiles * g["BLOCK_N"]) * g["BLOCK_K"] * ELEM_BYTES[dtype] // (4 * threads)
    return acc + operands + 40


def smem_bytes(g: Mapping[str, Any], dtype: str, tiles: int) -> int:
    """Shared memory: the MMA's operand tiles once per pipeline stage (one buffer without pipelining) and, with
    swap_ab, the fp32 accumulators passing through it to be transposed for the epilogue."""
    operands = max(1, g["num_stages"]) * (g["BLOCK_M"] + tiles * g["BLOCK_N"]) * g["BLOCK_K"] * ELEM_BYTES[dtype]
    return operands + (tiles * g["BLOCK_M"] * g["BLOCK_N"] * 4 if g["swap_ab"] else 0)


def programs(g: Mapping[str, Any], target: Target) -> int:
    """The grid: 0 for a program per work item (the plan's upper bound), else `persistent` programs per SM."""
    return g["persistent"] * target.num_sms


def rules(tiles: int) -> tuple[Rule, ...]:
    """The family's rule table, in priority order (`tiles` 2: gate and up tiles per step; 1: the down projection)."""

    def block_m_fits(g, p, t):
        rows = p.dims["T"] * p.dims["TOPK"]  # an expert sees at most every slot
        return f"BLOCK_M={g['BLOCK_M']} is taller than the {rows} routed rows need" \
            if g["BLOCK_M"] > max(16, next_pow2(rows)) else None

    def fits_registers(g, p, t):
        regs = registers(g, p.dtype, tiles)
        return f"needs ~{regs} registers per thread (> {MAX_REGISTERS}: it would spill)" if regs > MAX_REGISTERS \
            else None

    def fix_registers(fam, g, p, t):
        """More warps, then a narrower K step, fewer weight rows, fewer token rows."""
        trial = dict(g)
        if fam._step_up(trial, "num_warps") and registers(trial, p.dtype, tiles) < registers(g, p.dtype, tiles):
            g.update(trial)
            return True
        if g["BLOCK_K"] > 64 and fam._step_down(g, "BLOCK_K"):
            return True
        return fam._step_down(g, "BLOCK_N") or fam._step_down(g, "BLOCK_M") or fam._step_down(g, "BLOCK_K")

    def threads_busy(g, p, t):
        threads, vector = 32 * g["num_warps"], 16 // ELEM_BYTES[p.dtype]
        if g["num_warps"] > 2 and g["BLOCK_N"] * g["BLOCK_K"] < threads * vector:
            return (f"a {g['BLOCK_N']}x{g['BLOCK_K']} weight tile gives {threads} threads less than one 16-byte "
                    "vector each")
        return None

    def smem_fits(g, p, t):
        smem = smem_bytes(g, p.dtype, tiles)
        return f"needs ~{smem} bytes of shared memory (> {t.smem_bytes})" if smem > t.smem_bytes else None

    def fix_smem(fam, g, p, t):
        return fam._step_down(g, "num_stages") or fam._step_down(g, "BLOCK_K") or fam._step_down(g, "BLOCK_N")

    def routing_fits(g, p, t):
        if g["routing"] == "in_kernel" and not routes_in_kernel(p):
            return (f"{p.dims['T'] * p.dims['TOPK']} slots over {p.dims['E']} experts are more than a program sorts "
                    "itself: routing=torch")
        return None

    def canonical_group(g, p, t):
        if g["work"] == "tile_major" and g["GROUP_M"] != 1:
            return "tile-major work items group no row blocks: GROUP_M=1"
        return None

    table = [
        Rule("block_m_fits", block_m_fits, lambda fam, g, p, t: fam._step_down(g, "BLOCK_M"), hard=False),
        block_fits("BLOCK_N", "N", 16),
        block_fits("BLOCK_K", "K", 32),
        Rule("registers", fits_registers, fix_registers),
        Rule("threads_busy", threads_busy, lambda fam, g, p, t: fam._step_down(g, "num_warps")),
        Rule("smem_fits", smem_fits, fix_smem),
        Rule("canonical_group", canonical_group, lambda fam, g, p, t: fam._set(g, "GROUP_M", 1)),
        # soft: an elite of a decode step stays valid for a longer one, whose plan sorts in torch
        Rule("routing_fits", routing_fits, lambda fam, g, p, t: fam._set(g, "routing", "torch"), hard=False),
    ]
    if tiles == 1:
        def canonical_combine(g, p, t):
            if p.dims["TOPK"] == 1 and g["combine"] != "in_kernel":
                return "top-1 routing stores each token's row directly: combine=in_kernel"
            return None

        table.append(Rule("canonical_combine", canonical_combine,
                          lambda fam, g, p, t: fam._set(g, "combine", "in_kernel")))
    return tuple(table)


class _MoEFamily(FromTable, GenomeFamily):
    tiles = 2

    @property
    def rules(self) -> tuple[Rule, ...]:
        # made on demand, not kept: a family is pickled to the workers, and the rules are closures
        return rules(self.tiles)

    def _genes(self) -> list[Gene]:
        genes = [
            PowerOfTwo("BLOCK_M", 16, 128, group="tile", doc="routed token rows of one expert per work item"),
            PowerOfTwo("BLOCK_N", 16, 256, group="tile", doc="weight rows (output columns) per work item"),
            PowerOfTwo("BLOCK_K", 32, 256, group="tile", doc="K per step of a work item's loop"),
            IntChoice("GROUP_M", (1, 4, 8, 16), group="order",
                      doc="expert-major only: row blocks that sweep the N tiles together (their x rows stay in L2)"),
            Categorical("work", ("expert_major", "tile_major"), group="order",
                        doc="work items ordered row block by row block (N tiles inner), or N tile by N tile (an "
                            "expert's row blocks side by side share a weight tile)"),
            Boolean("swap_ab", group="structure",
                    doc="W tile @ x^T: the weight rows on the MMA's wide side, the few gathered tokens on its narrow "
                        "one (the small-M path for decode)"),
            IntChoice("persistent", (0, 1, 2, 4), group="launch",
                      doc="0: a program per work item; else programs per SM, each walking work items"),
            Categorical("routing", ("torch", "in_kernel"), group="structure",
                        doc="the slots sorted by expert in torch (sort, searchsorted), or by each program itself "
                            "(a decode step's few slots: one launch)",
                        implied=("torch",)),  # added after the first goldens: their genomes sort in torch
            IntChoice("num_warps", (2, 4, 8), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3, 4, 5), group="launch", doc="pipelining depth of the K loop"),
        ]
        if self.tiles == 1:
            genes.append(Categorical("combine", ("in_kernel", "torch_sum"), group="structure",
                                     doc="each token's top-k rows summed in slot order by the program that brings "
                                         "the last one, or left in fp32 for one torch sum"))
        return genes

    def base(self, **values: Any) -> dict[str, Any]:
        """64x64x64 tiles, expert-major without grouping, a program per work item, 4 warps, 3 stages; updated by
        `values`."""
        g = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 1, "work": "expert_major", "swap_ab": False,
             "persistent": 0, "routing": "torch", "num_warps": 4, "num_stages": 3}
        if self.tiles == 1:
            g["combine"] = "in_kernel"
        g.update(values)
        return g

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """The small-M path (BLOCK_M 16, swap_ab, weight tiles of 32-128 rows) for a few rows per expert, grouped-GEMM
        tiles for many, both work orders, persistent grids and, for the down projection, both combines."""
        d = problem.dims
        rows_per_expert = -(-d["T"] * d["TOPK"] // d["E"])
        raw = []
        for bn, bk, warps, stages in ((32, 256, 4, 3), (64, 128, 4, 4), (128, 128, 8, 3), (64, 256, 4, 2)):
            raw.append(self.base(BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, swap_ab=True, num_warps=warps,
                                 num_stages=stages))
        raw.append(self.base(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, swap_ab=True, num_stages=4, work="tile_major"))
        raw.append(self.base(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, swap_ab=True, num_stages=4, persistent=2))
        if routes_in_kernel(problem):  # a decode step: each of the small-M seeds with the routing in the kernel too
            raw += [dict(g, routing="in_kernel") for g in raw[:6]]
        if rows_per_expert > 16:
            for bm, bn, bk, warps, stages, group in ((64, 64, 64, 4, 4, 8), (64, 128, 64, 4, 3, 8),
                                                     (128, 128, 64, 8, 3, 8), (128, 64, 64, 4, 4, 4),
                                                     (32, 64, 128, 4, 3, 1)):
                raw.append(self.base(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                                     GROUP_M=group))
            raw.append(self.base(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_stages=3, work="tile_major"))
            raw.append(self.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, GROUP_M=8, persistent=1))
        if self.tiles == 1 and d["TOPK"] > 1:
            raw += [dict(g, combine="torch_sum") for g in raw[:2] + raw[-2:]]
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "block_m": Descriptor("block_m", lambda g, r: log2(g["BLOCK_M"]), tuple(float(x) for x in range(4, 8)),
                                  "log2(BLOCK_M)", label=labels.power_of_two),
            "block_n": Descriptor("block_n", lambda g, r: log2(g["BLOCK_N"]), tuple(float(x) for x in range(4, 9)),
                                  "log2(BLOCK_N)", label=labels.power_of_two),
            "block_k": Descriptor("block_k", lambda g, r: log2(g["BLOCK_K"]), tuple(float(x) for x in range(5, 9)),
                                  "log2(BLOCK_K)", label=labels.power_of_two),
            "swap_ab": Descriptor("swap_ab", lambda g, r: float(g["swap_ab"]), (0.0, 1.0), "0 x @ W^T, 1 W @ x^T",
                                  label=labels.categories(("x @ W^T", "W @ x^T"))),
            "work": Descriptor("work", lambda g, r: float(g["work"] == "tile_major"), (0.0, 1.0),
                               "0 expert-major, 1 tile-major", label=labels.categories(("expert-major", "tile-major"))),
            "stages": Descriptor("stages", lambda g, r: float(g["num_stages"]), tuple(float(x) for x in range(1, 6)),
                                 "num_stages"),
        }


class MoEGateUpFamily(_MoEFamily):
    name = "moe_gate_up"
    tiles = 2


class MoEDownFamily(_MoEFamily):
    name = "moe_down"
    tiles = 1
