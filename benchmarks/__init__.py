"""Development benchmarks: harnesses that measure evo itself, run from a checkout (`python -m benchmarks.NAME`).
Not part of the installed package; what users run is `evo bench`, `evo bench-search` and the zoo's benches
(evo.bench).

- driver_load (with loadtest's fake GPUs): the search driver under 1-8 simulated GPUs, no GPU needed;
- launch (launch_results writes its files): exported kernels on the clocks a user sees, on a GPU;
- measure_eval: the evaluator's throughput and repeatability on a GPU;
- compare_search: MAP-Elites against random search and an exhaustive grid on a GPU;
- scaling (a package): one search on 1, 2 and 4 GPUs, its rates, busy shares and time to quality, on GPUs.
"""
