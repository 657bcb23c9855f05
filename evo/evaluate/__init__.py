"""Evaluation: render -> compile (CPU) -> check -> time (GPU); executors decide where each stage runs."""
