"""How a search scales with GPUs, measured on GPUs (`python -m benchmarks.scaling`, issue 46): each workload (an
experiment's problems in turn, a model's whole zoo) once per GPU count, and per count the evaluation rates, the GPU
workers' busy shares, the compile queue, the driver's CPU and each problem's time to quality.

- quality: time to quality (when a run's best came within 99% of the reference run's final elite);
- rates: rates, busy shares and CPU of one run from its rows and clocks;
- queue: the compile pool's queue over time, sampled from the stores while a run goes on;
- stores: one run's record from its stores, and their copies without kernel texts;
- workloads: what runs (`evo run` of an experiment, `evo zoo --run` of a model) and its environment;
- runner: one run in a child process; session: every workload on every count under a deadline;
- analyse and report: the document from a session's folder, its goals and its table; cli: the command.

The pure parts (quality, rates, queue_intervals) are tested on synthetic rows in tests/benchmarks/scaling/.
"""

from benchmarks.scaling.quality import SHARE, best_ms, clock_origin, quality_goal, quality_table, reach
from benchmarks.scaling.rates import run_rates, speedups

__all__ = ["SHARE", "best_ms", "clock_origin", "quality_goal", "quality_table", "reach", "run_rates", "speedups"]
