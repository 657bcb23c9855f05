"""The softmax genome: y = softmax(x) along each row of a contiguous [M, N] input.

The row-wise genes (genomes/rowwise.py) plus how a looped kernel keeps its running statistics: one running
max and sum per row, rescaled at every step (one exponential per element and per pass, but a cross-thread
reduction at every step), or one per lane of the tile, merged after the loop (no reduction inside the loop,
two exponentials per element in the first pass, and three fp32 tiles alive).
"""

from __future__ import annotations

from typing import Any

from genomes.genes import Categorical, Gene
from genomes.rowwise import RowwiseFamily, tile_per_thread

__all__ = ["SoftmaxFamily"]


class SoftmaxFamily(RowwiseFamily):
    name = "softmax"

    def _extra_genes(self) -> list[Gene]:
        return [Categorical("stats", ("row", "lane"), group="structure",
                            doc="looped only: running max/sum per row (reduced every step) or per lane (merged once)")]

    def live_values(self, g: dict[str, Any]) -> int:
        if g["mode"] == "looped" and g["stats"] == "lane":
            return 3 * tile_per_thread(g)  # the loaded tile plus the running max and sum tiles
        return tile_per_thread(g)
