"""The RMSNorm genome: y = x * rsqrt(mean(x^2) + eps) * w along each row of a contiguous [M, N] input.

The row-wise genes (genomes/rowwise.py) plus a cache hint on the weight, which every program reads again:
"evict_last" asks L2 to keep it.
"""

from __future__ import annotations

from typing import Any

from evo.problem import Problem
from genomes.genes import Categorical, Gene
from genomes.rowwise import ELEM_BYTES, RowwiseFamily, tile_per_thread

__all__ = ["RMSNormFamily"]


class RMSNormFamily(RowwiseFamily):
    name = "rmsnorm"

    def _extra_genes(self) -> list[Gene]:
        return [Categorical("evict_w", ("none", "evict_last"), group="cache",
                            doc="eviction hint on the loads of the weight, shared by every row")]

    def stage_bytes(self, g: dict[str, Any], problem: Problem) -> int:
        # the looped kernel's second loop also loads a BLOCK-wide slice of the weight
        weight = g["BLOCK"] * ELEM_BYTES[problem.dtype] if g["mode"] == "looped" else 0
        return super().stage_bytes(g, problem) + weight

    def live_values(self, g: dict[str, Any]) -> int:
        if g["mode"] == "looped":
            return 2 * tile_per_thread(g)  # the loaded tile and the running sums of squares
        if g["persistent"]:
            # the weight row, loaded once per program, stays in registers beside the tile
            return tile_per_thread(g) + g["BLOCK"] // (32 * g["num_warps"])
        return tile_per_thread(g)  # the weight is read piece by piece as the output is written
