"""The cache-attention genome: a decode step's attention over a KV cache with a mask (operators/cache_attention/).

A few queries against thousands of cached keys: the kernel is a stream of K and V from HBM, read once per KV head.
What decides its speed is that every SM streams (B x Hkv programs are few: SPLITS slices of the keys make the grid),
that each program keeps loads in flight (BLOCK_N keys per step, num_stages deep), and that the cache's empty slots
are skipped (SKIP_MASKED: one mask load per block decides).

The rules are one table (genomes/rule_table.py), each a check and its fix, read by `violations` and `repair`. A block
wider than the cache, or more slices than the cache has blocks, runs right but wastes programs (soft rules).
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

__all__ = ["CacheAttentionFamily", "rows", "registers", "MAX_REGISTERS"]

MAX_REGISTERS = 224  # of the 255 a thread may have: the estimate leaves out addresses and the mask


def rows(problem: Problem) -> int:
    """A program's query rows: the query heads of one KV head times the queries, padded to 16 (tl.dot)."""
    d = problem.dims
    return max(16, next_pow2(d["heads"] // max(d["kv_heads"], 1) * d["q_len"]))


def registers(g: Mapping[str, Any], problem: Problem) -> int:
    """fp32 registers per thread of the loop: the accumulator [rows, D], the scores and probabilities [rows, BLOCK_N],
    and the K and V tiles [BLOCK_N, D] (two 16-bit values a register)."""
    threads = 32 * g["num_warps"]
    d = max(16, next_pow2(problem.dims["head_dim"]))
    r = rows(problem)
    return (r * d + 2 * r * g["BLOCK_N"] + g["BLOCK_N"] * d) // threads + 24


def _smem(g: Mapping[str, Any], problem: Problem) -> int:
    if g["num_stages"] <= 1:
        return 0
    d = max(16, next_pow2(problem.dims["head_dim"]))
    return g["num_stages"] * 2 * g["BLOCK_N"] * d * ELEM_BYTES[problem.dtype]  # K and V: a buffer per stage


def _blocks(g: Mapping[str, Any], p: Problem) -> int:
    return -(-p.dims["kv_len"] // g["BLOCK_N"])


def rules() -> tuple[Rule, ...]:
    """The family's rule table, in priority order."""

    def block_n_fits(g, p, t):
        need = max(16, next_pow2(p.dims["kv_len"]))
        return f"BLOCK_N={g['BLOCK_N']} is wider than the {p.dims['kv_len']} keys need" if g["BLOCK_N"] > need else None

    def splits_have_blocks(g, p, t):
        blocks = _blocks(g, p)
        return f"SPLITS={g['SPLITS']} exceeds the {blocks} key blocks" if g["SPLITS"] > blocks else None

    def fits_registers(g, p, t):
        regs = registers(g, p)
        return f"needs ~{regs} registers per thread (> {MAX_REGISTERS}: it would spill)" if regs > MAX_REGISTERS \
            else None

    def fix_registers(fam, g, p, t):
        return fam._step_up(g, "num_warps") or fam._step_down(g, "BLOCK_N")

    def smem_fits(g, p, t):
        smem = _smem(g, p)
        return f"pipelined loads need ~{smem} bytes of shared memory (> {t.smem_bytes})" if smem > t.smem_bytes \
            else None

    return (
        Rule("block_n_fits", block_n_fits, lambda fam, g, p, t: fam._step_down(g, "BLOCK_N"), hard=False),
        Rule("splits_have_blocks", splits_have_blocks, lambda fam, g, p, t: fam._step_down(g, "SPLITS"), hard=False),
        Rule("registers", fits_registers, fix_registers),
        Rule("smem_fits", smem_fits, lambda fam, g, p, t: fam._step_down(g, "num_stages")),
    )


class CacheAttentionFamily(FromTable, GenomeFamily):
    name = "cache_attention"

    @property
    def rules(self) -> tuple[Rule, ...]:
        return rules()  # made on demand, not kept: a family is pickled to the workers, and the rules are closures

    def _genes(self) -> list[Gene]:
        return [
            PowerOfTwo("BLOCK_N", 16, 256, group="tile", doc="keys per step of a program's loop"),
            PowerOfTwo("SPLITS", 1, 64, group="split", doc="programs sharing one KV head's keys (all SMs busy)"),
            Categorical("skip_masked", (True, False), group="structure",
                        doc="skip a block of keys the mask hides entirely (the cache's empty slots)"),
            IntChoice("num_warps", (1, 2, 4, 8), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3, 4), group="launch", doc="pipelining depth of the key loop"),
        ]

    def base(self, **values: Any) -> dict[str, Any]:
        """64 keys a step at 4 warps, no split, empty blocks skipped; updated by `values`."""
        g = {"BLOCK_N": 64, "SPLITS": 1, "skip_masked": True, "num_warps": 4, "num_stages": 2}
        g.update(values)
        return g

    def fill_splits(self, problem: Problem, target: Target, block_n: int, waves: int = 1) -> int:
        """The smallest split whose grid gives every SM `waves` programs or more (at most one block a slice)."""
        d = problem.dims
        programs = d["batch"] * d["kv_heads"]
        blocks = -(-d["kv_len"] // block_n)
        split = 1
        while programs * split < waves * target.num_sms and split * 2 <= min(blocks, 64):
            split *= 2
        return split

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """Blocks of 32-128 keys at 2-8 warps, the split that fills the GPU once and twice over, pipelined 2-3 deep."""
        raw = []
        for bn, warps, stages in ((64, 4, 2), (128, 4, 2), (32, 2, 3), (64, 8, 3), (128, 8, 2), (32, 4, 2)):
            for waves in (1, 2):
                raw.append(self.base(BLOCK_N=bn, num_warps=warps, num_stages=stages,
                                     SPLITS=self.fill_splits(problem, target, bn, waves)))
        raw.append(self.base(SPLITS=self.fill_splits(problem, target, 64), skip_masked=False))
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "block_n": Descriptor("block_n", lambda g, r: log2(g["BLOCK_N"]), tuple(float(x) for x in range(4, 9)),
                                  "log2(BLOCK_N)", label=labels.power_of_two),
            "splits": Descriptor("splits", lambda g, r: log2(g["SPLITS"]), tuple(float(x) for x in range(7)),
                                 "log2(SPLITS)", label=labels.power_of_two),
            "num_warps": Descriptor("num_warps", lambda g, r: log2(g["num_warps"]), tuple(float(x) for x in range(4)),
                                    "log2(warps)", label=labels.power_of_two),
            "stages": Descriptor("stages", lambda g, r: float(g["num_stages"]), tuple(float(x) for x in range(1, 5)),
                                 "num_stages"),
        }
