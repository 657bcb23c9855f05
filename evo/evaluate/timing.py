"""Timing GPU work: warm-up, L2 flushed before every timed run, CUDA events, median and spread.

The flush reads a 256 MiB buffer (`flush="read"`), which evicts whatever the last run left in L2 (its dirty
output lines are written back then, outside the timed region) and leaves L2 holding clean lines. A flush that
writes (`flush="write"`, a memset, as triton.testing.do_bench does) leaves L2 full of dirty lines, and the timed
run then pays for writing them back as its own reads evict them: up to the L2's size in extra HBM traffic,
which weighs most on small memory-bound kernels. Both modes evict the timed run's inputs. Measured on an H200
(reports/gpu/stream-k-probe-h200.json), write flush then read flush: cuBLAS at 16x4096x4096 bf16 (32 MiB of B)
18.7 then 15.6 us; softmax 8192x5000 42.8 then 40.4 us; 4096^3 within 1%.

Candidates and their baseline are timed interleaved (A B A B ...) so clock and thermal drift affect both
alike; the ratio of their medians is what a result reports.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Timing", "time_interleaved", "time_one", "FLUSH_MODES", "PROTOCOL"]

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


FLUSH_MODES = ("read", "write")
# Recorded with every measurement's versions: timings are served again only under the same protocol. "+call-host":
# every row also holds the call and host clocks (evo.evaluate.clocks); rows measured before lack them.
PROTOCOL = "events+l2-flush-read+call-host"


def _flusher(device: Any, nbytes: int, mode: str) -> Callable[[], Any]:
    """A callable that evicts L2 by reading (a sum into one number) or writing (a memset) `nbytes`."""
    import torch

    if mode not in FLUSH_MODES:
        raise ValueError(f"flush must be one of {FLUSH_MODES}, got {mode!r}")
    key = (str(device), nbytes)
    if key not in _FLUSH:
        _FLUSH[key] = torch.ones(nbytes // 4, dtype=torch.int32, device=device)
    buf = _FLUSH[key]
    if mode == "write":
        return buf.zero_
    return lambda: torch.sum(buf, dtype=torch.int64)


def time_interleaved(fns: list[Callable[[], Any]], *, reps: int = 30, warmup: int = 3, budget_ms: float = 400.0,
                     flush_bytes: int = 256 << 20, flush: str = "read", device: Any = "cuda") -> list[Timing]:
    """Time each of `fns` `reps` times, interleaved, each run after an L2 flush; returns one Timing per fn.

    The number of repetitions shrinks when the functions are slow, so that the whole measurement stays near
    `budget_ms` of GPU time (never fewer than 5 repetitions each, or `reps` when fewer were asked for).
    """
    import torch

    evict = _flusher(device, flush_bytes, flush)
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
            evict()
            s, e = events[i][r]
            s.record()
            fn()
            e.record()
    torch.cuda.synchronize(device)
    return [Timing.of([s.elapsed_time(e) for s, e in evs]) for evs in events]


def time_one(fn: Callable[[], Any], **kwargs: Any) -> Timing:
    return time_interleaved([fn], **kwargs)[0]
