"""The FP8 GEMM genome: y[M, N] = (a[M, K] @ W[N, K]^T) scaled, e4m3 operands and fp32 accumulation
(operators/fp8_gemm/).

The scale mode is the problem's (the operator's variant), not a gene: `tensor` (one scale each), `channel` (a scale
per row of a, or one, and one per output channel of W) and `block` (a scale per 1x128 group of a, per 128x128 block
of W: DeepSeek-V3's checkpoints). The genes are the GEMM's: the output tile, its K step, the group-M swizzle of the
tile order, a split of K over programs reduced in the kernel, and two structures: `swap_ab` computes y^T = W a^T so
that W's rows fill the tensor core's wide side when a has a few rows (decode), and `promote` adds each K step's
product into the fp32 accumulator (Hopper's FP8 tensor cores keep fewer bits in a long accumulation; the block mode
always does this, as it scales each step).

The rules are one table (genomes/rule_table.py), each a check and its fix, read by `violations` and `repair`. Tiles
wider than the problem needs and more splits than K has steps run right but waste work (soft rules): a genome stays
valid for smaller problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Boolean, Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rowwise import next_pow2
from genomes.rule_table import FromTable, Rule, unmovable
from genomes.tile_rules import block_fits, split_has_steps

__all__ = ["FP8GemmFamily", "MODES", "SCALE_BLOCK", "accumulator_registers", "shared_bytes", "rules",
           "MAX_ACC_REGISTERS"]

MODES = ("tensor", "channel", "block")
SCALE_BLOCK = 128  # the block scales' width along K (and W's block height): what FP8 checkpoints ship
MAX_ACC_REGISTERS = 160  # fp32 accumulator registers per thread, of 255: room for addresses, scales, the epilogue


def accumulator_registers(g: Mapping[str, Any], block: bool) -> int:
    """fp32 registers a thread holds for the output tile: the accumulator, and beside it each step's product where
    it is added in (block scales, promotion). sm_90 compiles (Triton 3.9, bf16 out) spilled only where this passed
    160: 128x256 at 8 warps with promotion (255 registers, 64-168 spilled), none at 128 or below."""
    return (2 if block or g["promote"] else 1) * g["BLOCK_M"] * g["BLOCK_N"] // (32 * g["num_warps"])


def shared_bytes(g: Mapping[str, Any]) -> int:
    """Shared memory of the pipelined K loop: num_stages buffers of the a and W tiles, one byte an element (at least
    one buffer: tl.dot reads its operands from shared memory); a persistent grid's flattened loop stages the output
    tile too (sm_90 compiles: 131,072 bytes for 128x128x128 at 4 stages, 163,840 persistent)."""
    pipeline = max(1, g["num_stages"]) * (g["BLOCK_M"] + g["BLOCK_N"]) * g["BLOCK_K"]
    return pipeline + (2 * g["BLOCK_M"] * g["BLOCK_N"] if g["persistent"] else 0)


def rules(mode: str) -> tuple[Rule, ...]:
    """The family's rule table for scale mode `mode`, in priority order."""
    block = mode == "block"

    def whole_groups(g, p, t):
        k = p.dims["K"]
        if block and k % SCALE_BLOCK:
            return f"K={k} is not a multiple of {SCALE_BLOCK}: block scales cover whole 1x{SCALE_BLOCK} groups of K"
        return None

    def step_in_one_group(g, p, t):
        if block and g["BLOCK_K"] > SCALE_BLOCK:
            return f"BLOCK_K={g['BLOCK_K']} spans more than one {SCALE_BLOCK}-wide scale group of K"
        return None

    def descriptor_rows_aligned(g, p, t):
        k = p.dims["K"]
        if g["memory"] == "descriptor" and k % 16:
            return f"tensor descriptors need rows of 16-byte multiples; K={k} bytes of e4m3 is not"
        return None

    def promote_canonical(g, p, t):
        if block and g["promote"]:
            return "block scales add every K step's product into the accumulator already: promote=False"
        return None

    def fits_registers(g, p, t):
        regs = accumulator_registers(g, block)
        if regs > MAX_ACC_REGISTERS:
            return f"a {g['BLOCK_M']}x{g['BLOCK_N']} tile holds ~{regs} fp32 registers per thread (> " \
                   f"{MAX_ACC_REGISTERS}: it would spill)"
        return None

    def fix_registers(fam, g, p, t):
        """More warps, then no promotion, then a narrower tile (the longer side first)."""
        if fam._step_up(g, "num_warps"):
            return True
        if not block and g["promote"] and fam._set(g, "promote", False):
            return True
        longer = "BLOCK_N" if g["BLOCK_N"] >= g["BLOCK_M"] else "BLOCK_M"
        return fam._step_down(g, longer) or fam._step_down(g, "BLOCK_M" if longer == "BLOCK_N" else "BLOCK_N")

    def smem_fits(g, p, t):
        smem = shared_bytes(g)
        return f"pipelined loads need ~{smem} bytes of shared memory (> {t.smem_bytes})" if smem > t.smem_bytes \
            else None

    def fix_smem(fam, g, p, t):
        return fam._step_down(g, "num_stages") or fam._step_down(g, "BLOCK_K")

    def persistent_has_work(g, p, t):
        d = p.dims
        items = -(-d["M"] // g["BLOCK_M"]) * -(-d["N"] // g["BLOCK_N"]) * g["SPLIT_K"]
        if g["persistent"] and items <= g["persistent"] * t.num_sms:
            return f"{items} work items are no more than the persistent grid's programs: persistent=0"
        return None

    def group_has_rows(g, p, t):
        tiles_m = -(-p.dims["M"] // g["BLOCK_M"])
        if g["GROUP_M"] > 1 and tiles_m == 1:
            return "one row of tiles has no order to swizzle: GROUP_M=1"
        return None

    return (
        Rule("whole_groups", whole_groups, unmovable(whole_groups)),  # the problem's own (a smoke run's clipped K)
        Rule("step_in_one_group", step_in_one_group, lambda fam, g, p, t: fam._step_down(g, "BLOCK_K")),
        Rule("descriptor_rows_aligned", descriptor_rows_aligned, lambda fam, g, p, t: fam._set(g, "memory", "pointer")),
        Rule("promote_canonical", promote_canonical, lambda fam, g, p, t: fam._set(g, "promote", False)),
        block_fits("BLOCK_M", "M", 16),
        block_fits("BLOCK_N", "N", 16),
        block_fits("BLOCK_K", "K", 32),
        Rule("registers", fits_registers, fix_registers),
        Rule("smem_fits", smem_fits, fix_smem),
        split_has_steps(),
        Rule("persistent_has_work", persistent_has_work, lambda fam, g, p, t: fam._set(g, "persistent", 0),
             hard=False),
        Rule("group_has_rows", group_has_rows, lambda fam, g, p, t: fam._set(g, "GROUP_M", 1), hard=False),
    )


class FP8GemmFamily(FromTable, GenomeFamily):
    name = "fp8_gemm"

    def __init__(self, overrides: Mapping[str, list[Any]] | None = None, mode: str = "tensor") -> None:
        if mode not in MODES:
            raise ValueError(f"scale mode must be one of {', '.join(MODES)}; got {mode!r}")
        self.mode = mode
        super().__init__(overrides)

    @property
    def rules(self) -> tuple[Rule, ...]:
        # made on demand, not kept: a family is pickled to the workers, and the rules are closures
        return rules(self.mode)

    def _genes(self) -> list[Gene]:
        return [
            PowerOfTwo("BLOCK_M", 16, 256, group="tile", doc="rows of a (output rows) per program"),
            PowerOfTwo("BLOCK_N", 16, 256, group="tile", doc="rows of W (output columns) per program"),
            PowerOfTwo("BLOCK_K", 32, 256, group="tile", doc="K per step of a program's loop"),
            IntChoice("GROUP_M", (1, 4, 8, 16), group="order",
                      doc="rows of tiles a group of programs walks column by column (L2 reuse of W)"),
            PowerOfTwo("SPLIT_K", 1, 16, group="split",
                       doc="programs sharing one output tile's K, reduced in split order by the last to arrive"),
            Categorical("memory", ("pointer", "descriptor"), group="structure", implied=("pointer",),
                        doc="a and W by pointer loads, or through tensor descriptors made in the kernel (TMA)"),
            IntChoice("persistent", (0, 1, 2), group="grid", implied=(0,),
                      doc="programs per SM of a persistent grid walking the (tile, split) items (0: one per item)"),
            Boolean("swap_ab", group="structure", doc="compute y^T = W a^T: W's rows on the tensor core's wide side"),
            Boolean("promote", group="structure",
                    doc="add each K step's product into the fp32 accumulator (Hopper's FP8 MMA accumulates with "
                        "fewer bits)"),
            IntChoice("num_warps", (4, 8), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3, 4, 5, 6), group="launch", doc="pipelining depth of the K loop"),
        ]

    def base(self, **values: Any) -> dict[str, Any]:
        """128x128 tiles with 128-wide K steps, 4 warps, 3 stages, groups of 8 rows of tiles, no split; updated by
        `values`."""
        g = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "SPLIT_K": 1, "swap_ab": False,
             "promote": False, "memory": "pointer", "persistent": 0, "num_warps": 4, "num_stages": 3}
        g.update(values)
        return g

    def fill_split(self, problem: Problem, target: Target, block_m: int, block_n: int, block_k: int,
                   waves: int = 1) -> int:
        """The smallest split whose grid gives every SM `waves` programs or more (as many as K has steps, at most)."""
        d = problem.dims
        tiles = -(-d["N"] // block_n) * -(-d["M"] // block_m)
        steps = -(-d["K"] // block_k)
        split = 1
        while tiles * split < waves * target.num_sms and split * 2 <= min(steps, 16):
            split *= 2
        return split

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """Prefill tiles (128x128 and 128x256 at 8 warps, 64x128), each with and without promotion outside the block
        mode; for a few rows (M <= 64) W's rows on the wide side (swap_ab) with the split that fills the GPU; each by
        pointers and through tensor descriptors, the prefill tiles also on a persistent grid."""
        m = problem.dims["M"]
        raw = []
        for bm, bn, bk, warps, stages in ((128, 128, 128, 8, 4), (128, 256, 128, 8, 3), (64, 128, 128, 4, 4),
                                          (128, 128, 64, 4, 5)):
            for promote in (False, True):
                for memory in ("pointer", "descriptor"):
                    raw.append(self.base(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                                         promote=promote, memory=memory))
            raw.append(self.base(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                                 memory="descriptor", persistent=1))
        if m <= 64:
            bm = max(16, next_pow2(m))
            for bn, bk, stages in ((64, 128, 4), (128, 128, 4), (64, 256, 3)):
                for waves in (1, 2):
                    for memory in ("pointer", "descriptor"):
                        raw.append(self.base(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, swap_ab=True, num_stages=stages,
                                             GROUP_M=1, memory=memory,
                                             SPLIT_K=self.fill_split(problem, target, bm, bn, bk, waves)))
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "block_m": Descriptor("block_m", lambda g, r: log2(g["BLOCK_M"]), tuple(float(x) for x in range(4, 9)),
                                  "log2(BLOCK_M)", label=labels.power_of_two),
            "block_n": Descriptor("block_n", lambda g, r: log2(g["BLOCK_N"]), tuple(float(x) for x in range(4, 9)),
                                  "log2(BLOCK_N)", label=labels.power_of_two),
            "block_k": Descriptor("block_k", lambda g, r: log2(g["BLOCK_K"]), tuple(float(x) for x in range(5, 9)),
                                  "log2(BLOCK_K)", label=labels.power_of_two),
            "split_k": Descriptor("split_k", lambda g, r: log2(g["SPLIT_K"]), tuple(float(x) for x in range(5)),
                                  "log2(SPLIT_K)", label=labels.power_of_two),
            "swap_ab": Descriptor("swap_ab", lambda g, r: float(g["swap_ab"]), (0.0, 1.0), "0 a x W^T, 1 W x a^T",
                                  label=labels.categories(("a W^T", "W a^T"))),
            "stages": Descriptor("stages", lambda g, r: float(g["num_stages"]), tuple(float(x) for x in range(1, 7)),
                                 "num_stages"),
        }
