"""The GPU scaling script's old place: `python -m tests.gpu.scaling ARGS` runs `python -m benchmarks.scaling ARGS`
(benchmarks/scaling/: every workload once per GPU count, rates, busy shares, the compile queue, the driver's CPU and
each problem's time to quality; its arguments: `python -m benchmarks.scaling --help`)."""

from __future__ import annotations

import sys

from benchmarks.scaling.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
