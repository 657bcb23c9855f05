"""Benchmarks: evo's elites side by side with the alternatives, and evaluator measurements."""
