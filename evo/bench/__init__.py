"""Benchmarks: `evo bench` (evo.bench.command: search, then time the elites side by side with the alternatives,
measure.py; over several GPUs, parallel.py; JSON and markdown, results.py) and the evaluator's own measurement
(`python -m evo.bench.measure_eval`)."""
