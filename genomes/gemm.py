"""The GEMM genome: C[M, N] = A[M, K] @ B[K, N].

Genes cover the tile shape, launch shape (warps, stages), the program-id swizzle, the K loop's own
pipelining (prefetch depth and unroll), warp specialization, and the structure around the loop: a
persistent grid (optionally finishing its last partial wave with stream-K), the memory path (plain pointers,
or tensor descriptors, i.e. TMA on Hopper, built either inside the kernel or on the host and passed in as
arguments), split-K, and a subtiled epilogue; and the backend that renders it: Triton's `tl`, or Gluon with real
producer and consumer warp groups (genomes/gemm_gluon.py). Validity encodes the limits of the target (shared
memory, registers, tensor-descriptor alignment) and what Triton cannot compile (see ../shared/TRITON_NOTES.md),
one rule table that violations() and repair() both read (genomes/gemm_rules.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.gemm_gluon import GLUON_FIXED
from genomes.gemm_resources import (
    DESCRIPTOR_MEMORY,
    ELEM_BYTES,
    MAX_ACC_REGS,
    acc_regs_per_thread,
    column_blocks,
    smem_estimate,
    unaligned_rows,
)
from genomes.gemm_rules import MAX_WS_STAGES, PLAN, TWO_TILE_REFUSALS, Moves, rules, smem_needed
from genomes.genes import Boolean, Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rule_table import plan_repair, table_violations

__all__ = ["GemmFamily", "SPLIT_VALUES", "wave_split", "TUTORIAL_CONFIGS", "DESCRIPTOR_MEMORY", "ELEM_BYTES",
           "smem_estimate", "acc_regs_per_thread", "column_blocks", "unaligned_rows", "MAX_ACC_REGS", "MAX_WS_STAGES",
           "TWO_TILE_REFUSALS"]

# The Triton matmul tutorial's 16 CUDA configurations: (BM, BN, BK, GROUP_M, num_stages, num_warps).
TUTORIAL_CONFIGS = (
    (128, 256, 64, 8, 3, 8), (64, 256, 32, 8, 4, 4), (128, 128, 32, 8, 4, 4), (128, 64, 32, 8, 4, 4),
    (64, 128, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4), (64, 32, 32, 8, 5, 2), (32, 64, 32, 8, 5, 2),
    (128, 256, 128, 8, 3, 8), (256, 128, 128, 8, 3, 8), (256, 64, 128, 8, 4, 4), (64, 256, 128, 8, 4, 4),
    (128, 128, 128, 8, 4, 4), (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4), (128, 32, 64, 8, 4, 4),
)


SPLIT_VALUES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)  # the split_k gene's domain

STRUCTURES = ("pointer", "pointer+persistent", "TMA", "TMA+persistent", "TMA+warp-specialized", "host TMA",
              "host TMA+persistent", "persistent+stream-K", "Gluon cooperative", "Gluon ping-pong", "Gluon row-split",
              "Gluon stream-K")


def _structure(g: Mapping[str, Any], resources: Any) -> float:
    """Cell of the memory path and grid: in-kernel and host descriptors get their own cells (appended after
    the older ones, whose values stay put), so an archive keeps the best of each; so do Gluon's two schedules."""
    if g["backend"] == "gluon":
        if g["stream_k"]:
            return 11.0
        return 10.0 if g["consumer_split"] == "rows" else 8.0 + (g["consumers"] == 2)
    if g["warp_specialize"]:
        return 4.0
    if g["stream_k"]:
        return 7.0
    if g["memory"] == "host_descriptor":
        return 5.0 + g["persistent"]
    return 2.0 * (g["memory"] == "descriptor") + g["persistent"]


def wave_split(problem: Problem, target: Target, block_m: int, block_n: int, block_k: int, waves: int = 1) -> int:
    """The split_k that best fills `waves` waves of the target's SMs with the problem's output tiles of
    block_m x block_n: the fullest last wave over the splits that keep every split K steps of its own and the
    grid within `waves` waves, the smaller split on a tie (fewer partials to sum). 16 tiles on 132 SMs: 8 (128
    programs); 4 tiles: 32; 1 tile: 128; 132 tiles or more: 1."""
    d = problem.dims
    tiles = -(-d["M"] // block_m) * -(-d["N"] // block_n)
    steps = -(-d["K"] // block_k)
    best, best_fill = 1, 0.0
    for split in SPLIT_VALUES:
        programs = tiles * split
        if split > steps or programs > waves * target.num_sms:
            break
        fill = programs / (-(-programs // target.num_sms) * target.num_sms)
        if fill > best_fill + 1e-9:
            best, best_fill = split, fill
    return best


class GemmFamily(GenomeFamily):
    """The GEMM genes. `b_tiles` = 2 makes the family of a kernel that reads two B tiles per K step into two
    accumulators (the fused SwiGLU epilogue): it counts twice the B buffers and accumulator registers, and
    refuses the features that do not carry a second accumulator (TWO_TILE_REFUSALS, wide two-block tiles)."""

    name = "gemm"

    def __init__(self, overrides: Mapping[str, list[Any]] | None = None, b_tiles: int = 1,
                 reads_tile: bool = False, ws_refusal: str = "", gluon_refusal: str = "") -> None:
        if b_tiles not in (1, 2):
            raise ValueError(f"b_tiles must be 1 or 2, got {b_tiles}")
        self.b_tiles = b_tiles
        self.reads_tile = reads_tile  # the epilogue reads a tile of another tensor (smem_estimate)
        self.ws_refusal = ws_refusal  # why an epilogue refuses warp specialization ("" = it does not)
        self.gluon_refusal = gluon_refusal  # why the kernel is not rendered with Gluon ("" = it is)
        super().__init__(overrides)

    def __getstate__(self) -> dict[str, Any]:
        # the rule table (genomes/gemm_rules.py) is closures: made again where a family is unpickled (a worker)
        return {k: v for k, v in self.__dict__.items() if k != "_rules"}

    def _smem(self, g: Mapping[str, Any], dtype: str) -> int:
        return smem_needed(g, dtype, self.b_tiles, self.reads_tile)

    def _genes(self) -> list[Gene]:
        return [
            IntChoice("BLOCK_M", (16, 32, 64, 128, 192, 256), group="tile",
                      doc="rows of C per program (192: three Gluon consumers of 64 rows each)"),
            IntChoice("BLOCK_N", (16, 32, 64, 96, 128, 192, 256, 320), group="tile",
                      doc="columns of C per program (96, 192 and 320 as two power-of-two blocks)"),
            PowerOfTwo("BLOCK_K", 16, 256, group="tile", doc="depth of one K step"),
            IntChoice("num_warps", (2, 4, 8), group="launch", doc="warps per program"),
            IntChoice("num_stages", (2, 3, 4, 5), group="launch", doc="software pipeline depth of tl.dot loads"),
            IntChoice("GROUP_M", (1, 4, 8, 16), group="swizzle", doc="tiles per program-id group (L2 reuse)"),
            Categorical("raster", ("row", "col"), group="swizzle",
                        doc="grouped row-major or grouped column-major tile order"),
            IntChoice("loop_stages", (0, 2, 3, 4), group="loop",
                      doc="prefetch depth of the K loop (tl.range num_stages); 0 = compiler default"),
            IntChoice("loop_unroll", (1, 2, 4), group="loop", doc="unroll factor of the K loop; 1 = none"),
            Boolean("warp_specialize", group="loop", doc="producer/consumer warp roles for the K loop"),
            Boolean("persistent", group="structure", doc="one program per SM looping over tiles"),
            Boolean("stream_k", group="structure",
                    doc="a persistent grid shares the tiles of its last partial wave by K steps (stream-K)"),
            Categorical("memory", ("pointer", "descriptor", "host_descriptor"), group="structure",
                        doc="plain pointer loads, or tensor descriptors (TMA) made in the kernel or on the host"),
            # 3, 6 and 12 too: a grid of tiles x splits can then come near a whole number of waves (36 tiles on
            # 132 SMs: 4 splits make 144 programs, two waves; 3 make 108, one)
            # 24-128: long K over a few tiles (an output under 1k x 1k, K in the hundreds of thousands) needs tens
            # of programs per tile to fill the GPU; the Triton kernel sums them in two levels (kernel.py)
            IntChoice("split_k", SPLIT_VALUES, group="structure",
                      doc="programs sharing one output tile along K (1 = off)"),
            Boolean("epilogue_subtile", group="structure", doc="store the output tile in two halves"),
            Boolean("pad_rows", group="structure",
                    doc="host descriptors over padded copies of operands whose rows are not 16-byte multiples"),
            Categorical("backend", ("triton", "gluon"), group="structure", implied=("triton",),
                        doc="rendered with Triton's tl, or with Gluon: TMA producer and wgmma consumer warp groups"),
            IntChoice("consumers", (1, 2, 3), group="loop", implied=(1,),
                      doc="Gluon MMA consumers: 1 on each tile (cooperative), or 2-3 that share the work"),
            Categorical("consumer_split", ("tiles", "rows"), group="loop", implied=("tiles",),
                        doc="how 2-3 Gluon consumers share the work: alternate tiles (ping-pong), or 64 rows "
                            "each of every tile (one B tile for all: a 192-row tile's operand traffic)"),
        ]

    # -- validity and repair: one rule table (genomes/gemm_rules.py) --------------------------------------
    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        return table_violations(rules(self), genome.as_dict(), problem, target)

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        g = plan_repair(Moves(self, rng), rules(self), PLAN, genome.as_dict(), problem, target)
        return self._repaired(g, genome, problem, target)

    # -- seeds and descriptors ------------------------------------------------------------------------
    def _gluon_refusal(self) -> str:
        return self.gluon_refusal or ("does not read two B tiles per K step (SwiGLU)" if self.b_tiles > 1 else "")

    def base(self, **values: Any) -> dict[str, Any]:
        """A plain tutorial-like genome dict (pointer loads, no persistence, no split-K) updated by `values`."""
        g = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3, "GROUP_M": 8,
             "raster": "row", "loop_stages": 0, "loop_unroll": 1, "warp_specialize": False,
             "persistent": False, "stream_k": False, "memory": "pointer", "split_k": 1, "epilogue_subtile": False,
             "pad_rows": False, "backend": "triton", "consumers": 1, "consumer_split": "tiles"}
        g.update(values)
        return g

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        raw = [self.base(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=gm, num_stages=s, num_warps=w)
               for bm, bn, bk, gm, s, w in TUTORIAL_CONFIGS]
        raw += [
            # measured on an H200 (../shared/TRITON_NOTES.md): 1.06-1.15x cuBLAS on large shapes
            self.base(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8, persistent=True,
                      memory="host_descriptor", epilogue_subtile=True),
            self.base(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8, persistent=True,
                      memory="host_descriptor", epilogue_subtile=True, stream_k=True),
            self.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=4, memory="descriptor",
                      warp_specialize=True),
            # 192-wide tiles (two column blocks), as cuBLAS picks where 128 and 256 leave a wave part-empty
            self.base(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_stages=4, num_warps=8, memory="host_descriptor"),
            self.base(BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_stages=4, num_warps=8, persistent=True,
                      memory="host_descriptor"),
            # 320-wide (256 + 64 columns): 64 rows keep the accumulator at 80 registers per thread of 8 warps
            self.base(BLOCK_M=64, BLOCK_N=320, BLOCK_K=64, num_stages=3, num_warps=8, memory="host_descriptor"),
            self.base(BLOCK_M=16, BLOCK_N=64, BLOCK_K=256, num_stages=4, num_warps=4, split_k=4),
            # three-way split-K: measured on an H100 at 768x768x49152 (0.86x cuBLAS against 0.58x for four ways:
            # 36 tiles x 3 = 108 programs fill one wave, x 4 = 144 spill into a second) and at 1024x1024x32768
            self.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=8, memory="host_descriptor",
                      split_k=3),
            self.base(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8, memory="host_descriptor",
                      split_k=3),
            self.base(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, num_stages=4, num_warps=4, split_k=8,
                      memory="descriptor"),
            self.base(BLOCK_M=16, BLOCK_N=128, BLOCK_K=128, num_stages=4, num_warps=4, split_k=8,
                      memory="host_descriptor"),
        ]
        raw += self._long_k_seeds(problem, target)
        gluon = dict(GLUON_FIXED, backend="gluon")
        raw += [  # the Gluon rendering's schedules (refused, and dropped, where it cannot run)
            self.base(**gluon, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=8),
            self.base(**gluon, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=8),
            self.base(**gluon, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=4, consumers=2),
            self.base(**gluon, BLOCK_M=64, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=4, consumers=2),
            # 192-wide Gluon tiles (two column blocks): cuBLAS's width where 128 and 256 leave a wave part-empty
            self.base(**gluon, BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_stages=4, num_warps=8),
            self.base(**gluon, BLOCK_M=64, BLOCK_N=192, BLOCK_K=64, num_stages=4, num_warps=4, consumers=2),
            # consumers that split every tile's rows (64 each) around one B tile: 192x192 is cuBLAS's tile on
            # 3000^3-class squares (1.94 waves of 132 SMs), with 20% fewer operand bytes per FLOP than 128x192
            self.base(**gluon, BLOCK_M=192, BLOCK_N=192, BLOCK_K=64, num_stages=3, num_warps=4, consumers=3,
                      consumer_split="rows"),
            self.base(**gluon, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=3, num_warps=4, consumers=2,
                      consumer_split="rows"),
            self.base(**gluon, BLOCK_M=128, BLOCK_N=192, BLOCK_K=64, num_stages=4, num_warps=4, consumers=2,
                      consumer_split="rows"),
            # cuBLAS's 128x320 (256 + 64 columns) at 1152x4352x4096: 9 x 14 = 126 tiles, one wave of 132 SMs; two
            # stages and the whole-tile staging fill 194 KiB of shared memory
            self.base(**gluon, BLOCK_M=128, BLOCK_N=320, BLOCK_K=64, num_stages=2, num_warps=4, consumers=2,
                      consumer_split="rows"),
            # (no stream-K seed: on an H200 the Gluon stream-K ran at 0.58-0.81x the plain Gluon kernel's speed
            # at 1000x3000x2000 and 4096^3, reports/gpu/gemm-stream-k-h200-2026-11-26; mutation still reaches it)
            # long K over few tiles: K ranges of a tile as work items, partials summed by a second launch
            self.base(**gluon, BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=8, split_k=3),
            self.base(**gluon, BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_stages=5, num_warps=4, split_k=4),
        ]
        if self.b_tiles > 1:
            # two accumulators per tile (SwiGLU): a 128x128 tile of each is the MMA work of a 128x256 one
            raw += [self.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_stages=s, num_warps=8, persistent=p,
                              memory="host_descriptor", epilogue_subtile=sub)
                    for s, p, sub in ((3, True, True), (4, True, False), (3, False, False), (4, False, False))]
            raw += [self.base(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_stages=4, num_warps=4, memory="host_descriptor"),
                    self.base(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_stages=4, num_warps=4, memory="host_descriptor")]
        return self._repaired_seeds(raw, problem, target)

    def _long_k_seeds(self, problem: Problem, target: Target) -> list[dict[str, Any]]:
        """Split-K that fills the GPU where the output has fewer tiles than SMs (long K over a small output): each
        tile shape with the split that makes one wave of it (wave_split), and Gluon ones (their second launch sums):
        cooperative, and consumers that split the rows (cuBLAS's 192x192 x 8 splits at 768x768x49152: three
        consumers of 64 rows, two column blocks)."""
        out = []
        for bm, bn, bk, warps, stages, memory in ((128, 128, 64, 8, 4, "host_descriptor"),
                                                  (128, 256, 64, 8, 3, "host_descriptor"),
                                                  (64, 128, 64, 4, 4, "host_descriptor"),
                                                  (64, 64, 128, 4, 4, "descriptor"),
                                                  (128, 128, 64, 8, 4, "pointer")):
            split = wave_split(problem, target, bm, bn, bk)
            if split > 1:
                out.append(self.base(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages,
                                     memory=memory, split_k=split))
        for bm, bn, stages, warps, consumers, rows in ((128, 128, 4, 8, 1, "tiles"), (192, 192, 3, 4, 3, "rows"),
                                                       (128, 256, 3, 4, 2, "rows")):
            split = wave_split(problem, target, bm, bn, 64)
            if split > 1:
                out.append(self.base(**GLUON_FIXED, backend="gluon", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64,
                                     num_stages=stages, num_warps=warps, consumers=consumers, consumer_split=rows,
                                     split_k=split))
        return out

    def problem_features(self, values: Mapping[str, Any], problem: Problem) -> list[float]:
        """log2 of the output tiles, of the programs that share them (tiles x split_k: against the SMs, how full
        the waves are) and of the K steps each program runs (what a split leaves it)."""
        d = problem.dims
        tiles = -(-d["M"] // values["BLOCK_M"]) * -(-d["N"] // values["BLOCK_N"])
        steps = -(-d["K"] // values["BLOCK_K"]) / values["split_k"]
        return [float(np.log2(tiles)), float(np.log2(tiles * values["split_k"])), float(np.log2(max(steps, 1.0)))]

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))  # noqa: E731
        return {
            "tile_area": Descriptor("tile_area", lambda g, r: log2(g["BLOCK_M"] * g["BLOCK_N"]),
                                    tuple(float(x) for x in range(8, 17)), "log2(BLOCK_M * BLOCK_N)",
                                    label=labels.tile),
            "block_k": Descriptor("block_k", lambda g, r: log2(g["BLOCK_K"]),
                                  tuple(float(x) for x in range(4, 9)), "log2(BLOCK_K)",
                                  label=labels.power_of_two),
            "num_stages": Descriptor("num_stages", lambda g, r: g["num_stages"], (2.0, 3.0, 4.0, 5.0),
                                     "kernel pipeline depth"),
            "num_warps": Descriptor("num_warps", lambda g, r: g["num_warps"], (2.0, 4.0, 8.0), "warps"),
            "split_k": Descriptor("split_k", lambda g, r: log2(g["split_k"]), tuple(float(x) for x in range(8)),
                                  "log2(split_k), 3 binned with 2, 6 with 4, 12 with 8 and so on",
                                  label=labels.power_of_two),
            "structure": Descriptor("structure", _structure, tuple(float(i) for i in range(len(STRUCTURES))),
                                    "0 pointer, 1 pointer+persistent, 2 TMA, 3 TMA+persistent, "
                                    "4 TMA+warp-specialized, 5 host TMA, 6 host TMA+persistent, "
                                    "7 persistent+stream-K (any memory path), 8 Gluon cooperative, "
                                    "9 Gluon ping-pong, 10 Gluon row-split, 11 Gluon stream-K",
                                    label=labels.categories(STRUCTURES)),
            "smem_kib": Descriptor("smem_kib", lambda g, r: r["shared"] / 1024,
                                   (0.0, 32.0, 64.0, 96.0, 128.0, 160.0, 192.0), "shared memory (KiB)",
                                   needs_resources=True),
            "registers": Descriptor("registers", lambda g, r: r["registers"],
                                    (0.0, 64.0, 96.0, 128.0, 168.0, 200.0, 232.0), "registers per thread",
                                    needs_resources=True),
        }
