"""Genes shared by row-wise, memory-bound kernels (softmax, RMSNorm) over a contiguous [M, N] input.

One program handles ROWS rows at a time as a [ROWS, BLOCK] tile. In a single-pass kernel BLOCK covers the
whole row (N rounded up to a power of two) and each element is read once; a looped kernel walks the row in
BLOCK-wide steps, once to gather the row statistics and once to write the output (the second read mostly
hits in cache). A persistent grid launches a fixed number of programs per SM that loop over row blocks.

Validity says what can run: a single-pass block must cover the row, and the fp32 values a thread keeps
alive (ROWS * BLOCK / threads per live tile) must stay within half the registers a thread may have at that
many warps, the pipelined loads within shared memory. A wider block than needed, or a looped kernel whose
block covers the row (one step), is wasteful but valid, so a genome stays valid for a narrower problem of
the same operator (a transferred elite, a clipped smoke-test problem). Random draws and repair aim at the
sensible forms: the narrowest covering block for a single pass, a block narrower than the row for a loop. The rules
are one table (`rules`), each a check and its fix, that violations() and repair() both read.
Subclasses add their own genes and count their own live values. Genes `split` and `split_mode` spread one row
over several programs (genomes/rowwise_split.py): "covering the row" then means covering one chunk of it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rowwise_split import SPLIT_PLAN, SPLIT_RULES, chunk_width, sensible_splits, split_seeds
from genomes.rule_table import Rule, plan_repair, table_violations

__all__ = ["RowwiseFamily", "MAX_LIVE_PER_THREAD", "ELEM_BYTES", "next_pow2", "tile_per_thread", "live_limit", "rules",
           "PLAN"]

ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

# fp32 values a thread may keep alive. Compiled for sm_90 (Triton 3.9), n live values took ~1.3n-2n registers
# (addresses and the loaded 16-bit values need some too): 64 took 90-127, 128 spilled. A thread has at most
# 255 registers, and 65536 / threads when a program has more than 8 warps (64 at 32 warps, which spilled
# from 48 live values on).
MAX_LIVE_PER_THREAD = 64


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def tile_per_thread(g: dict[str, Any]) -> int:
    """Elements of one [ROWS, BLOCK] tile per thread, spread over num_warps warps."""
    return g["ROWS"] * g["BLOCK"] // (32 * g["num_warps"])


def live_limit(num_warps: int) -> int:
    """Live fp32 values a thread may keep: half its register budget, at most MAX_LIVE_PER_THREAD."""
    return min(MAX_LIVE_PER_THREAD, min(255, 65536 // (32 * num_warps)) // 2)


# The order repair settles the rules in: the rows against the problem, the split genes' rules, the single-pass block
# (wider, or a loop when no block covers the row), then the resources: register pressure (more warps, fewer rows, a
# loop, a narrower step), threads with work (fewer warps, more rows), the pipeline's shared memory.
PLAN = ("rows_fit", *SPLIT_PLAN, "single_covers", "registers", "threads", "smem")


def rules(family: RowwiseFamily) -> tuple[Rule, ...]:
    """The table of `family` (the live values and shared memory its kernel counts), in the order violations()
    reports it: each rule a check and its fix."""

    def single_covers(g, p, t):
        n = p.dims["cols"]
        chunk = chunk_width(n, g["split"])
        if g["mode"] == "single" and g["BLOCK"] < chunk:
            return (f"single pass needs BLOCK >= N={n} (the whole row in one block)" if g["split"] == 1 else
                    f"single pass needs BLOCK >= {chunk} (one chunk of N={n} split {g['split']} ways)")
        return None

    def fix_single_covers(fam, g, p, t):
        """The narrowest block covering the row (or chunk), else a loop over the widest narrower one."""
        if not fam._set(g, "BLOCK", fam.single_block(p, g["split"])):
            fam._to_looped(g, p)
        return False

    def rows_fit(g, p, t):
        m = p.dims["rows"]
        return f"ROWS={g['ROWS']} exceeds M={m} rounded up to a power of two" if g["ROWS"] > next_pow2(m) else None

    def registers(g, p, t):
        live, limit = family.live_values(g), live_limit(g["num_warps"])
        return f"keeps {live} fp32 values per thread alive (> {limit} at {g['num_warps']} warps)" if live > limit \
            else None

    def fix_registers(fam, g, p, t):
        """Spread over more warps, then fewer rows, then narrower (looped) steps."""
        if fam._relieves(g, "num_warps", up=True) or fam._step(g, "ROWS", up=False):
            return True
        if g["mode"] == "single" and fam._to_looped(g, p):
            return True
        return g["mode"] == "looped" and fam._step(g, "BLOCK", up=False)

    def threads(g, p, t):
        if g["num_warps"] > 1 and g["ROWS"] * g["BLOCK"] < 32 * g["num_warps"]:
            return f"a {g['ROWS']}x{g['BLOCK']} tile has fewer elements than {32 * g['num_warps']} threads"
        return None

    def fix_threads(fam, g, p, t):
        """Fewer warps (one warp is always allowed), then more rows."""
        if fam._step(g, "num_warps", up=False):
            return True
        return g["split"] == 1 and g["ROWS"] < next_pow2(p.dims["rows"]) and fam._step(g, "ROWS", up=True)

    def smem(g, p, t):
        need = family.smem_estimate(g, p)
        return f"pipelined loads need ~{need} bytes of shared memory (> {t.smem_bytes})" if need > t.smem_bytes \
            else None

    return (
        *SPLIT_RULES,
        Rule("single_covers", single_covers, fix_single_covers),
        Rule("rows_fit", rows_fit, lambda fam, g, p, t: fam._step(g, "ROWS", up=False)),
        Rule("registers", registers, fix_registers),
        Rule("threads", threads, fix_threads),
        Rule("smem", smem, lambda fam, g, p, t: fam._step(g, "num_stages", up=False)),
    )


class RowwiseFamily(GenomeFamily):
    """Shared genes, validity, repair, seeds and descriptors; subclasses set `name` and may extend."""

    def _genes(self) -> list[Gene]:
        return [
            # 65536 would keep 64 values per thread even at 32 warps, beyond their register budget
            PowerOfTwo("BLOCK", 16, 32768, group="tile", doc="columns per step (the whole padded row in single pass)"),
            PowerOfTwo("ROWS", 1, 64, group="tile", doc="rows per program"),
            Categorical("mode", ("single", "looped"), group="structure",
                        doc="whole row in registers (one read) or a loop over BLOCK-wide steps (two reads)"),
            IntChoice("persistent", (0, 1, 2, 4, 8), group="structure",
                      doc="programs per SM of a persistent grid looping over row blocks; 0 = one per row block"),
            IntChoice("num_warps", (1, 2, 4, 8, 16, 32), group="launch", doc="warps per program"),
            IntChoice("num_stages", (1, 2, 3, 4), group="launch",
                      doc="software pipelining depth of the kernel's loop over rows or columns"),
            Categorical("evict_x", ("none", "evict_first", "evict_last"), group="cache",
                        doc="eviction hint on the last read of x (the only read in single pass)"),
            Categorical("store_y", ("none", "evict_first", "streaming"), group="cache",
                        doc="hint on the stores of the output: evict first, or the streaming cache modifier .cs"),
            Categorical("keep_x", ("none", "evict_last"), group="cache",
                        doc="looped only: hint on the first read of x, so that the second read finds it in cache"),
            PowerOfTwo("split", 1, 64, group="split",
                       doc="programs per row, each on a chunk of ceil(N/split) columns; 1 = one program per row"),
            Categorical("split_mode", ("two_launch", "cooperative"), group="split",
                        doc="split > 1: partial statistics then a combining launch (x read twice), or one launch "
                            "whose programs wait for the row's other chunks (x read once)"),
        ] + self._extra_genes()

    def _extra_genes(self) -> list[Gene]:
        return []

    # -- validity -------------------------------------------------------------------------------------
    def live_values(self, g: dict[str, Any]) -> int:
        """fp32 values a thread keeps alive: by default one tile (the row block being worked on)."""
        return tile_per_thread(g)

    def pipelined(self, g: dict[str, Any]) -> bool:
        """Whether the kernel has a loop whose loads are software-pipelined (through shared memory)."""
        return g["num_stages"] > 1 and (g["mode"] == "looped" or g["persistent"] > 0)

    def stage_bytes(self, g: dict[str, Any], problem: Problem) -> int:
        """Bytes one pipeline stage loads: a [ROWS, BLOCK] tile of x (subclasses add their other loads)."""
        return g["ROWS"] * g["BLOCK"] * ELEM_BYTES[problem.dtype]

    def smem_estimate(self, g: dict[str, Any], problem: Problem) -> int:
        """Shared memory of the pipelined loads: num_stages - 1 buffers in flight (as Triton 3.9 allocates
        for sm_90), the reductions' few bytes aside."""
        return (g["num_stages"] - 1) * self.stage_bytes(g, problem) if self.pipelined(g) else 0

    def single_block(self, problem: Problem, split: int = 1) -> int:
        """The BLOCK of a single-pass kernel: the narrowest allowed width covering the row, or one chunk of it
        (unrestricted: the width rounded up to a power of two)."""
        n = chunk_width(problem.dims["cols"], split)
        return min((b for b in self.genes["BLOCK"].values if b >= n), default=next_pow2(n))

    @property
    def rules(self) -> tuple[Rule, ...]:
        # made on demand, not kept: a family is pickled to the workers, and the rules are closures
        return rules(self)

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        return table_violations(self.rules, genome.as_dict(), problem, target)

    # -- repair: the fixes' moves ---------------------------------------------------------------------
    def _step(self, g: dict[str, Any], name: str, up: bool) -> bool:
        """Move gene `name` one value up or down its domain; False when already at the end."""
        vals = [v for v in self.genes[name].values if (v > g[name] if up else v < g[name])]
        if not vals:
            return False
        g[name] = min(vals) if up else max(vals)
        return True

    def _relieves(self, g: dict[str, Any], name: str, up: bool) -> bool:
        """Step gene `name` if that lowers the register pressure (live values over their limit)."""
        trial = dict(g)
        if not self._step(trial, name, up):
            return False
        if self.live_values(trial) * live_limit(g["num_warps"]) >= self.live_values(g) * live_limit(trial["num_warps"]):
            return False
        g.update(trial)
        return True

    def _to_looped(self, g: dict[str, Any], problem: Problem) -> bool:
        """Make a single pass a loop over the widest block narrower than its row (or chunk); a cooperative split
        becomes a two-launch one first (its chunk must stay in registers). False when mode cannot change."""
        if g["split"] > 1 and g["split_mode"] == "cooperative" and not self._set(g, "split_mode", "two_launch"):
            return False
        if not self._set(g, "mode", "looped"):
            return False
        n = chunk_width(problem.dims["cols"], g["split"])
        while g["BLOCK"] >= n and self._step(g, "BLOCK", up=False):
            pass
        return True

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        g = plan_repair(self, self.rules, PLAN, genome.as_dict(), problem, target)
        return self._repaired(g, genome, problem, target)

    def random(self, rng: np.random.Generator, problem: Problem, target: Target) -> Genome:
        """Uniform genes, except split (among the sensible ones: rowwise_split.sensible_splits) and BLOCK: the
        narrowest block covering the row (or chunk) for a single pass, one drawn among the narrower widths for a
        loop (other draws would be valid but wasteful)."""
        values = {name: gene.random(rng) for name, gene in self.genes.items()}
        splits = sensible_splits(self, problem, target)
        values["split"] = splits[int(rng.integers(len(splits)))]
        chunk = chunk_width(problem.dims["cols"], values["split"])
        narrower = [b for b in self.genes["BLOCK"].values if b < chunk]
        if values["mode"] == "looped" and narrower:
            values["BLOCK"] = narrower[int(rng.integers(len(narrower)))]
        elif self.single_block(problem, values["split"]) in self.genes["BLOCK"].values:
            values["BLOCK"] = self.single_block(problem, values["split"])
        return self.repair(self.make(values), problem, target, rng)

    # -- seeds and descriptors ------------------------------------------------------------------------
    def base(self, **values: Any) -> dict[str, Any]:
        """One row per program, whole row, plain launch; updated by `values`."""
        g = {"BLOCK": 1024, "ROWS": 1, "mode": "single", "persistent": 0, "num_warps": 8, "num_stages": 1,
             "evict_x": "none", "store_y": "none", "keep_x": "none", "split": 1, "split_mode": "two_launch"}
        g.update({gene.name: gene.values[0] for gene in self._extra_genes()})
        g.update(values)
        return g

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        n = problem.dims["cols"]
        whole = self.single_block(problem)
        # The Triton softmax tutorial's heuristic: more warps for wider rows.
        tutorial_warps = 4 if whole < 2048 else 8 if whole < 4096 else 16
        raw = [self.base(BLOCK=whole, num_warps=w) for w in (4, 8, 16, tutorial_warps * 2)]
        raw += [self.base(BLOCK=whole, num_warps=tutorial_warps, persistent=p, num_stages=s)
                for p, s in ((1, 2), (2, 2), (4, 1))]
        raw += [self.base(BLOCK=whole, num_warps=8, evict_x="evict_first", store_y="streaming")]
        # Narrow rows: several rows per program so that a program moves enough bytes.
        rows = max(1, 4096 // whole)
        raw += [self.base(BLOCK=whole, ROWS=rows, num_warps=w) for w in (4, 8)]
        # Wide rows: loop over the row in steps, keeping the first read in cache for the second.
        for block, w in ((2048, 8), (4096, 8), (4096, 16), (8192, 16)):
            if block < n:
                raw += [self.base(BLOCK=block, mode="looped", num_warps=w, keep_x="evict_last",
                                  evict_x="evict_first", num_stages=2),
                        self.base(BLOCK=block, mode="looped", num_warps=w, persistent=2, num_stages=2)]
        # Few rows: spread each row over several programs so that every SM works.
        raw += split_seeds(self, problem, target)
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "block": Descriptor("block", lambda g, r: log2(g["BLOCK"]), tuple(float(x) for x in range(4, 16)),
                                "log2(BLOCK)", label=labels.power_of_two),
            "rows": Descriptor("rows", lambda g, r: log2(g["ROWS"]), tuple(float(x) for x in range(7)),
                               "log2(rows per program)", label=labels.power_of_two),
            "num_warps": Descriptor("num_warps", lambda g, r: log2(g["num_warps"]),
                                    tuple(float(x) for x in range(6)), "log2(warps)",
                                    label=labels.power_of_two),
            "looped": Descriptor("looped", lambda g, r: float(g["mode"] == "looped"), (0.0, 1.0),
                                 "0 single pass, 1 looped", label=labels.categories(("single pass", "looped"))),
            "persistent": Descriptor("persistent", lambda g, r: g["persistent"], (0.0, 1.0, 2.0, 4.0, 8.0),
                                     "programs per SM (0 = not persistent)"),
            "elems_per_thread": Descriptor(
                "elems_per_thread", lambda g, r: log2(max(1, g["ROWS"] * g["BLOCK"] // (32 * g["num_warps"]))),
                tuple(float(x) for x in range(8)), "log2(elements of a tile per thread)",
                label=labels.power_of_two),
            "split": Descriptor("split", lambda g, r: log2(g["split"]), tuple(float(x) for x in range(7)),
                                "log2(programs per row)", label=labels.power_of_two),
            "reduction": Descriptor("reduction", lambda g, r: 0.0 if g["split"] == 1 else
                                    1.0 if g["split_mode"] == "two_launch" else 2.0, (0.0, 1.0, 2.0),
                                    "how a row is reduced: 0 one program, 1 split over two launches, 2 cooperative",
                                    label=labels.categories(("one program", "two launches", "cooperative"))),
            "registers": Descriptor("registers", lambda g, r: r["registers"],
                                    (0.0, 32.0, 64.0, 96.0, 128.0, 168.0, 232.0), "registers per thread",
                                    needs_resources=True),
        }
