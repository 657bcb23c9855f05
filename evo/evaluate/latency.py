"""How long the two remote stages take, and so how many compiles an executor keeps in flight ahead of its
workers.

A worker that frees up must find a compiled candidate. With `n` workers each taking `m` seconds a candidate,
candidates are consumed at n / m a second; a compile that takes `c` seconds therefore needs n * c / m compiles
under way at all times (Little's law). When compiling is slower than measuring (GEMM: about 0.2 s of compile
against 0.1 s on an H200), a fixed window of twice the workers starves them, the more so the more GPUs there
are (benchmarks.driver_load: 68% of the ideal rate on 8 simulated GPUs, reports/gpu/driver-load-simulated.md).
"""

from __future__ import annotations

import math

__all__ = ["Latency"]

_WEIGHT = 0.1  # of the newest observation in the running means


class Latency:
    """Running means of the seconds from submit to result of compile tasks and of worker calls."""

    def __init__(self) -> None:
        self.compile_s: float | None = None
        self.measure_s: float | None = None

    @staticmethod
    def _mean(mean: float | None, seconds: float) -> float:
        return seconds if mean is None else mean + _WEIGHT * (seconds - mean)

    def compiled(self, seconds: float) -> None:
        self.compile_s = self._mean(self.compile_s, max(0.0, seconds))

    def measured(self, seconds: float) -> None:
        self.measure_s = self._mean(self.measure_s, max(0.0, seconds))

    def compile_ahead(self, workers: int, compile_slots: int) -> int:
        """Compiles to keep under way so that `workers` never wait for one, at most `compile_slots`; 0 until
        both stages have been timed."""
        if self.compile_s is None or not self.measure_s:
            return 0
        return min(compile_slots, math.ceil(workers * self.compile_s / self.measure_s))
