"""Compile a GPU script's kernels ahead, in a process pool, as a search's compile pool does: the product's own
ahead-of-time compile (evo.evaluate.compiler) fills Triton's cache, so the checks that follow load each kernel
instead of compiling it one after another on the GPU's process (a Gluon kernel takes seconds to compile)."""

from __future__ import annotations

from typing import Any

__all__ = ["compile_one", "precompile"]


def compile_one(item: tuple[str, tuple[int, ...], str, str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """In a compile process: (operator, sizes, dtype, genome JSON, target) -> (problem key/genome hash, status,
    reason, resources)."""
    import operators
    from evo.evaluate.candidate import Candidate
    from evo.evaluate.compiler import compile_candidate

    name, sizes, dtype, genome_json, target = item
    op = operators.get(name)
    problem = op.problem(sizes, dtype)
    genome = op.family.from_canonical(genome_json)
    result = compile_candidate(Candidate(problem, genome, op, source=op.render(genome, problem, target)), target)
    return f"{problem.key}/{genome.hash}", result.status, result.reason[:200], dict(result.resources)


def precompile(items: list[tuple[str, tuple[int, ...], str, str, Any]], workers: int
               ) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """Compile every item in `workers` spawned processes: (problem key)/(genome hash) -> (status, reason,
    resources)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max(1, workers), mp_context=multiprocessing.get_context("spawn")) as pool:
        return {key: (status, reason, res) for key, status, reason, res in pool.map(compile_one, items)}
