"""The add+RMSNorm genome: h = x + residual, y = rmsnorm(h) * w, rows of a contiguous [M, N] input, both written
(operators/add_rmsnorm/kernel.py).

One program takes ROWS rows. A single pass holds them whole in registers (BLOCK covers the row; x and the residual
read once); a looped kernel walks each row in BLOCK-wide steps, then reads back the h it wrote. Made for the decode
step of a layer (a few rows of 2-8k columns, where a launch is a few microseconds and what matters is that nothing
is read twice) and serving prefill too (thousands of rows: rows per program, warps, cache hints).

The rules are one table (genomes/rule_table.py): each a check and its fix, read by `violations` and `repair`. Rows
beyond M, a block wider than a single pass needs and a loop of one step are wasteful but run right (soft rules): a
genome stays valid for smaller problems.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rowwise import ELEM_BYTES, live_limit, next_pow2
from genomes.rule_table import Rule, table_repair, table_violations

__all__ = ["AddRMSNormFamily", "RULES", "live_values", "MIN_BLOCK"]

MIN_BLOCK = 64  # the narrowest BLOCK of the gene


def live_values(g: Mapping[str, Any]) -> int:
    """fp32 values a thread keeps alive: its share of the [ROWS, BLOCK] tile of h and of the weight slice (the
    looped kernel: the tile being read and the running sums of squares)."""
    threads = 32 * g["num_warps"]
    tile = g["ROWS"] * g["BLOCK"] // threads
    return tile + max(1, g["BLOCK"] // threads) if g["mode"] == "single" else 2 * tile


def _pipelined(g: Mapping[str, Any]) -> bool:
    return g["mode"] == "looped" and g["num_stages"] > 1


def _smem(g: Mapping[str, Any], problem: Problem) -> int:
    """Shared memory of the looped kernel's pipelined loads: num_stages - 1 stages of x and the residual."""
    return (g["num_stages"] - 1) * 2 * g["ROWS"] * g["BLOCK"] * ELEM_BYTES[problem.dtype] if _pipelined(g) else 0


def _rows_fit(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    m = p.dims["rows"]
    return f"ROWS={g['ROWS']} exceeds M={m} rounded up to a power of two" if g["ROWS"] > next_pow2(m) else None


def _single_covers(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    n = p.dims["cols"]
    return f"single pass needs BLOCK >= N={n} (the whole row)" if g["mode"] == "single" and g["BLOCK"] < n else None


def _single_block(n: int) -> int:
    return max(MIN_BLOCK, next_pow2(n))


def _single_exact(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    want = _single_block(p.dims["cols"])
    if g["mode"] == "single" and g["BLOCK"] > want:
        return f"a single pass over N={p.dims['cols']} needs BLOCK={want}, not {g['BLOCK']} (lanes past the row idle)"
    return None


def _fix_single(fam: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """Widen the block to the row, or loop over the widest block narrower than the row."""
    if fam._set(g, "BLOCK", _single_block(p.dims["cols"])):
        return True
    return fam._set(g, "mode", "looped")


def _looped_narrower(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    n = p.dims["cols"]
    if g["mode"] == "looped" and g["BLOCK"] >= n and n > 1:
        return f"a looped kernel with BLOCK={g['BLOCK']} >= N={n} is a single pass that reads h twice"
    return None


def _fix_looped(fam: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    return fam._step_down(g, "BLOCK") or fam._set(g, "mode", "single")


def _registers(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    live, limit = live_values(g), live_limit(g["num_warps"])
    return f"keeps {live} fp32 values per thread alive (> {limit} at {g['num_warps']} warps)" if live > limit else None


def _fix_registers(fam: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """More warps (where that lowers the pressure), then fewer rows, then a loop, then narrower steps."""
    trial = dict(g)
    if fam._step_up(trial, "num_warps") and live_values(trial) * live_limit(g["num_warps"]) < \
            live_values(g) * live_limit(trial["num_warps"]):
        g.update(trial)
        return True
    if fam._step_down(g, "ROWS"):
        return True
    if g["mode"] == "single" and fam._set(g, "mode", "looped"):
        while g["BLOCK"] >= p.dims["cols"] and fam._step_down(g, "BLOCK"):
            pass
        return True
    return g["mode"] == "looped" and fam._step_down(g, "BLOCK")


def _threads_busy(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    threads = 32 * g["num_warps"]
    if g["num_warps"] > 1 and g["ROWS"] * g["BLOCK"] < threads:
        return f"a {g['ROWS']}x{g['BLOCK']} tile has fewer elements than {threads} threads"
    return None


def _one_stage_without_loop(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if g["mode"] == "single" and g["num_stages"] != 1:
        return "a single pass has no loop to pipeline: num_stages=1"
    return None


def _smem_fits(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    smem = _smem(g, p)
    return f"pipelined loads need ~{smem} bytes of shared memory (> {t.smem_bytes})" if smem > t.smem_bytes else None


RULES = (
    Rule("rows_fit", _rows_fit, lambda fam, g, p, t: fam._step_down(g, "ROWS"), hard=False),
    Rule("single_covers_row", _single_covers, _fix_single),
    Rule("single_block_exact", _single_exact, lambda fam, g, p, t: fam._set(g, "BLOCK", _single_block(p.dims["cols"])),
         hard=False),
    Rule("looped_is_narrower", _looped_narrower, _fix_looped, hard=False),
    Rule("registers", _registers, _fix_registers),
    Rule("threads_busy", _threads_busy, lambda fam, g, p, t: fam._step_down(g, "num_warps")),
    Rule("one_stage_without_loop", _one_stage_without_loop, lambda fam, g, p, t: fam._set(g, "num_stages", 1)),
    Rule("smem_fits", _smem_fits, lambda fam, g, p, t: fam._step_down(g, "num_stages")),
)


class AddRMSNormFamily(GenomeFamily):
    name = "add_rmsnorm"

    def _genes(self) -> list[Gene]:
        return [
            PowerOfTwo("BLOCK", MIN_BLOCK, 32768, group="tile",
                       doc="columns per step (the whole padded row in single pass)"),
            PowerOfTwo("ROWS", 1, 16, group="tile", doc="rows per program"),
            Categorical("mode", ("single", "looped"), group="structure",
                        doc="whole rows in registers (one read), or BLOCK-wide steps reading h back"),
            IntChoice("num_warps", (1, 2, 4, 8, 16), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3), group="launch", doc="looped only: pipelining depth of the loops"),
            Categorical("evict_in", ("none", "evict_first"), group="cache",
                        doc="eviction hint on the reads of x and the residual (each read once)"),
            Categorical("evict_w", ("none", "evict_last"), group="cache",
                        doc="eviction hint on the weight, which every program reads"),
            Categorical("store", ("none", "evict_first", "streaming"), group="cache",
                        doc="hint on the stores of y and h: evict first, or the streaming modifier .cs"),
        ]

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        return table_violations(RULES, genome.as_dict(), problem, target)

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        return self._repaired(table_repair(self, RULES, genome.as_dict(), problem, target), genome, problem, target)

    def base(self, **values: Any) -> dict[str, Any]:
        """One row per program, the whole row in registers, no hints; updated by `values`."""
        g = {"BLOCK": 4096, "ROWS": 1, "mode": "single", "num_warps": 8, "num_stages": 1, "evict_in": "none",
             "evict_w": "none", "store": "none"}
        g.update(values)
        return g

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        """Decode first (a handful of rows: one program per row, the whole row, 4-16 warps, hints on and off),
        then several rows per program for prefill, then loops for rows too wide for registers."""
        m, n = problem.dims["rows"], problem.dims["cols"]
        whole = _single_block(n)
        raw = [self.base(BLOCK=whole, num_warps=w) for w in (4, 8, 16)]
        raw += [self.base(BLOCK=whole, num_warps=8, evict_in="evict_first", evict_w="evict_last"),
                self.base(BLOCK=whole, num_warps=4, evict_w="evict_last", store="evict_first")]
        if m >= 64:
            rows = max(1, min(16, 8192 // whole))
            raw += [self.base(BLOCK=whole, ROWS=rows, num_warps=w) for w in (8, 16)]
        for block, w in ((2048, 8), (4096, 8), (8192, 16)):
            if block < n:
                raw += [self.base(BLOCK=block, mode="looped", num_warps=w, num_stages=2)]
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "block": Descriptor("block", lambda g, r: log2(g["BLOCK"]), tuple(float(x) for x in range(6, 16)),
                                "log2(BLOCK)", label=labels.power_of_two),
            "rows": Descriptor("rows", lambda g, r: log2(g["ROWS"]), tuple(float(x) for x in range(5)),
                               "log2(rows per program)", label=labels.power_of_two),
            "num_warps": Descriptor("num_warps", lambda g, r: log2(g["num_warps"]), tuple(float(x) for x in range(5)),
                                    "log2(warps)", label=labels.power_of_two),
            "looped": Descriptor("looped", lambda g, r: float(g["mode"] == "looped"), (0.0, 1.0),
                                 "0 single pass, 1 looped", label=labels.categories(("single pass", "looped"))),
            "hints": Descriptor("hints", lambda g, r: float((g["evict_in"] != "none") + (g["evict_w"] != "none")
                                                            + (g["store"] != "none")), (0.0, 1.0, 2.0, 3.0),
                                "cache hints in use (0-3)"),
        }
