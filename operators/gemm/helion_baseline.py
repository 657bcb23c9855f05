"""A Helion matmul, the GEMM contender written in Helion. Importing this module imports helion.

Helion reads the kernel's Python source, so the body lives at module level; `make_helion_matmul` wraps it
with the settings of one benchmark. With `static_shapes=True` Helion specialises (and autotunes) once per
shape, on the first call with that shape.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import helion
import helion.language as hl
import torch

__all__ = ["make_helion_matmul", "matmul_body", "supports_budget"]


def matmul_body(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(x.dtype)
    return out


def supports_budget() -> bool:
    """Whether this Helion can stop its autotuner at a wall-clock budget (autotune_budget_seconds, 1.1.0 on)."""
    return "autotune_budget_seconds" in {f.name for f in dataclasses.fields(helion.Settings)}


def _version() -> str:
    """Helion's installed version: helion has no __version__ attribute, so it comes from the package metadata."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("helion")
    except PackageNotFoundError:  # imported from a path, not installed
        return getattr(helion, "__version__", "of unknown version")


def make_helion_matmul(effort: str = "quick", seed: int = 0, config: dict[str, Any] | None = None,
                       budget_s: int | None = None) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The Helion matmul as C = f(A, B). `effort` is Helion's autotune_effort ("none", "quick", "full");
    `budget_s` stops the autotuner after that many seconds with the best configuration found so far;
    `config` pins one helion.Config instead of autotuning (tests)."""
    if effort not in ("none", "quick", "full"):
        raise ValueError(f"helion autotune effort must be 'none', 'quick' or 'full', got {effort!r}")
    settings: dict[str, Any] = dict(static_shapes=True, autotune_effort=effort, autotune_random_seed=seed,
                                    autotune_progress_bar=False, autotune_log_level=logging.WARNING)
    if budget_s is not None:
        if not supports_budget():
            raise ValueError(f"helion {_version()} cannot stop its autotuner at a "
                             "budget (autotune_budget_seconds came in helion 1.1.0)")
        settings["autotune_budget_seconds"] = int(budget_s)
    if config is not None:
        return helion.kernel(matmul_body, config=helion.Config(**config), **settings)
    return helion.kernel(matmul_body, **settings)
