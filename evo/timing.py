"""Timing GPU work: warm-up, L2 flushed before every timed run, CUDA events, median and spread.

Candidates and their baseline are timed interleaved (A B A B ...) so clock and thermal drift affect both
alike; the ratio of their medians is what a result reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Timing", "time_interleaved", "time_one"]

_FLUSH: dict[Any, Any] = {}


@dataclass(frozen=True)
class Timing:
    median_ms: float
    spread_ms: float  # inter-quartile range
    times_ms: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, times: list[float]) -> Timing:
        a = np.asarray(times, dtype=float)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(float(med), float(q3 - q1), [float(t) for t in a])


def _flush_buffer(device: Any, nbytes: int) -> Any:
    import torch

    key = (str(device), nbytes)
    if key not in _FLUSH:
        _FLUSH[key] = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
    return _FLUSH[key]


def time_interleaved(fns: list[Callable[[], Any]], *, reps: int = 30, warmup: int = 3, budget_ms: float = 400.0,
                     flush_bytes: int = 256 << 20, device: Any = "cuda") -> list[Timing]:
    """Time each of `fns` `reps` times, interleaved, each run after an L2 flush; returns one Timing per fn.

    The number of repetitions shrinks when the functions are slow, so that the whole measurement stays near
    `budget_ms` of GPU time (never fewer than 5 repetitions each, or `reps` when fewer were asked for).
    """
    import torch

    flush = _flush_buffer(device, flush_bytes)
    for fn in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize(device)
    # estimate one run of each to size the repetitions
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for fn in fns:
        fn()
    end.record()
    torch.cuda.synchronize(device)
    per_round = max(start.elapsed_time(end), 1e-3) + 0.05 * len(fns)  # + flush cost
    reps = int(max(min(5, reps), min(reps, budget_ms / per_round)))  # a slow kernel still gets 5 (or all asked)
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
              for _ in fns]
    for r in range(reps):
        for i, fn in enumerate(fns):
            flush.zero_()
            s, e = events[i][r]
            s.record()
            fn()
            e.record()
    torch.cuda.synchronize(device)
    return [Timing.of([s.elapsed_time(e) for s, e in evs]) for evs in events]


def time_one(fn: Callable[[], Any], **kwargs: Any) -> Timing:
    return time_interleaved([fn], **kwargs)[0]
