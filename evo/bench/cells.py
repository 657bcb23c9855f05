"""What every benchmark table shares: how a number, a problem and a GPU are written, the geometric mean of
ratios, and the name of evo's contender. Kept apart so that each table (evo bench's, its clocks', the launch
bench's) is a module of its own without importing the others."""

from __future__ import annotations

import math
import re
from typing import Any

__all__ = ["EVO_NAME", "gpu_slug", "geomean", "fmt", "problem_label", "speedup"]

EVO_NAME = "evo"  # the contender name of evo's elite kernel


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3' (file names name the GPU)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown-gpu"


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def problem_label(p: dict[str, Any]) -> str:
    """'4096×4096×4096 bf16' from a problem entry of a benchmark document."""
    dims = p.get("dims") or []
    shape = "×".join(str(p[d]) for d in dims) if dims else p["key"]
    return f"{shape} {p['dtype']}"


def speedup(other_ms: float | None, ms: float | None) -> float | None:
    """How many times faster a time `ms` is than `other_ms` (> 1: faster); None when either is unknown."""
    if not other_ms or not ms or not math.isfinite(other_ms) or not math.isfinite(ms):
        return None
    return other_ms / ms
