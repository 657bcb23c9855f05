"""Benchmarks users run: `evo bench` (evo.bench.command: search, then time the elites side by side with the
alternatives, measure.py; over several GPUs, parallel.py; JSON and markdown, results.py), `evo bench-search`
(search_bench.py: search methods compared) and the zoo's benches (`python -m evo.bench.generate`,
`python -m evo.bench.zoo_layer`). Harnesses that measure evo itself are in the checkout's benchmarks/."""
