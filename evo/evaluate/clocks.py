"""The clocks a user sees, beside the GPU time of evo.evaluate.timing.

GPU time (CUDA events around one launch, L2 flushed before it) is what a kernel costs the GPU. A caller pays
more: the host time of the call itself (argument checks, the launch through the driver), which decides the
per-call time whenever the GPU work is shorter than it. Three more clocks, all on the current stream:

- `call`: back-to-back eager calls, synchronised only at the ends of a round (what a Python loop over the op
  sees: max(host, GPU) per call, roughly); the inputs stay in L2 between calls, as they would in that loop;
- `graph`: rounds of the same calls captured once in a CUDA graph and replayed (what CUDA-graph users see: no
  host cost);
- `host`: the host time of one call: a short burst of calls issued back to back, timed before anything waits
  for the GPU (what the call costs the CPU).

Each function takes one or several zero-argument callables and returns per-callable figures, rounds
interleaved across callables so that clock drift affects them alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["call_ms", "graph_ms", "host_us", "calls_per_round"]


def _sync(device: Any) -> None:
    import torch

    if str(device).startswith("cpu"):  # the CPU (the interpreter, in tests) runs each call to its end: no queue
        return
    torch.cuda.synchronize(device)


def calls_per_round(per_call_ms: float, round_ms: float = 5.0, lo: int = 2, hi: int = 200) -> int:
    """How many back-to-back calls make a round of about `round_ms`, within [lo, hi]. Two calls at least (a call
    that queues behind another is what a loop sees), and no more for a slow kernel: host jitter is lost in a
    round of milliseconds, and at eight calls a round the clocks of a 10 ms kernel took 80% of its evaluation
    (GPU runs of 2026-11-25: 2.4 s of 3 s), so a search under a wall budget measured a third as many."""
    if per_call_ms <= 0:
        return hi
    return int(min(hi, max(lo, round_ms / per_call_ms)))


def _calls_in_round(fn: Callable[[], Any], round_ms: float, device: Any, hi: int = 200) -> int:
    """calls_per_round for fn, from the wall time of one call (synchronised at both ends)."""
    _sync(device)
    t = time.perf_counter()
    fn()
    _sync(device)
    return calls_per_round((time.perf_counter() - t) * 1e3, round_ms, hi=hi)


def call_ms(fns: list[Callable[[], Any]], *, rounds: int = 7, round_ms: float = 5.0, warmup: int = 3,
            device: Any = "cuda") -> list[float]:
    """Per-call milliseconds of back-to-back eager calls of each fn: the fastest of `rounds` rounds, each the wall
    time of a round (synchronised at both ends) over its calls. The fastest, not the median: other processes (a
    search's compile workers) only ever add time to a round, and the search keeps the best of many candidates, so a
    noisy figure would be picked for its luck (medians differed by half between a search and a re-measurement)."""
    n = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        n.append(_calls_in_round(fn, round_ms, device))
    per_call: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            _sync(device)
            t = time.perf_counter()
            for _ in range(n[i]):
                fn()
            _sync(device)
            per_call[i].append((time.perf_counter() - t) * 1e3 / n[i])
    return [float(min(p)) for p in per_call]


def host_us(fns: list[Callable[[], Any]], *, reps: int = 9, burst: int = 8, warmup: int = 3, round_ms: float = 5.0,
            device: Any = "cuda") -> list[float]:
    """Median host microseconds of one call of each fn: the wall time of a burst of calls issued back to back
    after a synchronisation, over their number, read before anything waits for the GPU (a queue of a few
    launches never blocks the host, so this is the host's own cost per call, GPU work overlapped as in a real
    loop). A burst is `burst` calls, fewer (two at least) for a fn whose calls take longer than `round_ms` in
    all: the host cost per call is the same, and each burst's GPU work is waited for before the next."""
    bursts = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        bursts.append(_calls_in_round(fn, round_ms, device, hi=burst))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            _sync(device)
            t = time.perf_counter()
            for _ in range(bursts[i]):
                fn()
            times[i].append((time.perf_counter() - t) * 1e6 / bursts[i])
    _sync(device)
    return [float(np.median(t)) for t in times]


def graph_ms(fns: list[Callable[[], Any]], *, calls: int | None = None, replays: int = 7, warmup: int = 3,
             round_ms: float = 5.0, device: Any = "cuda") -> list[float | None]:
    """Per-call milliseconds under CUDA-graph replay: each fn's calls captured in one graph (`calls` of them, else
    as many as make a round of about `round_ms`, as call_ms's rounds), then every graph replayed in turn,
    `replays` times (interleaved, as the other clocks), and the median of each graph's replays over its calls.

    Interleaved and round-sized because a GPU's clock depends on what it ran just before: an H200 ran back-to-back
    GEMMs at 1965 MHz in bursts of 5 ms and at 1575-1740 MHz in runs of 30 ms, under its power management
    (reports/gpu/session-2026-11-27-late/call8); contenders timed one after another, in graphs of 20 calls
    whatever their length, read different clocks (a kernel 26% "slower under graphs" than called, and cuBLAS 14%
    at 8192^3). None for a fn that cannot be captured (it synchronises, allocates outside the graph's pool, or
    launches on another stream)."""
    import torch

    graphs: list[tuple[Any, int] | None] = []
    for fn in fns:
        try:
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):  # warm-up off the capture, as torch's own docs ask
                for _ in range(warmup):
                    fn()
            torch.cuda.current_stream(device).wait_stream(side)
            n = calls if calls is not None else _calls_in_round(fn, round_ms, device)
            _sync(device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(n):
                    fn()
            graph.replay()
            _sync(device)
            graphs.append((graph, n))
        except Exception:  # a contender that cannot be captured has no graph clock; the others still do
            torch.cuda.synchronize(device)
            graphs.append(None)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(replays):
        for i, captured in enumerate(graphs):
            if captured is None:
                continue
            graph, n = captured
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) / n)
    return [float(np.median(t)) if captured is not None else None for t, captured in zip(times, graphs, strict=True)]
