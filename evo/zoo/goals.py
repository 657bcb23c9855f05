"""What the layer benchmark times (four ways, two clocks) and issue 29's goals for it, shared by the benchmark's
files (evo.bench.zoo_layer_results) and the zoo's report page (evo.surface.zoo_report_html)."""

from __future__ import annotations

from typing import Any

__all__ = ["WAYS", "TIME_KEYS", "GOALS", "speedup"]

WAYS = ("eager", "compile", "zoo_eager", "zoo_compile")
TIME_KEYS = tuple(f"{w}_ms" for w in WAYS) + tuple(f"{w}_graph_ms" for w in WAYS)
# (label, the rival's time key, the zoo's time key, the goal): issue 29's two goals
GOALS = (("vs compile, graphs", "compile_graph_ms", "zoo_compile_graph_ms", 1.10),
         ("vs eager, per call", "eager_ms", "zoo_eager_ms", 1.15))


def speedup(layer: dict[str, Any], rival: str, zoo: str) -> float | None:
    """The rival's time over the zoo's (> 1: the zoo is faster); None when either is missing."""
    a, b = layer.get(rival), layer.get(zoo)
    return a / b if a and b else None
