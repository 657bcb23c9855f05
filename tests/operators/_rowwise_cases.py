"""Shared cases for the row-wise operators' interpreter tests (softmax, RMSNorm): small problems, genomes that
cover every value of every gene, a seeded random sample, and running one case against the reference."""

from __future__ import annotations

from typing import Any

import numpy as np

from evo.evaluate.modules import load_source
from evo.problem import Problem, Target
from genomes.base import Genome, InvalidGenome
from operators.base import Operator

# Two SMs, so that a persistent grid has few programs and each loops over several row blocks.
TEST_TARGET = Target("test-2sm", 90, 232448, 2)

# Ragged widths (not multiples of most blocks) and row counts (not multiples of most ROWS), cheapest first.
# The wide ones exist for the large single-pass blocks; they have few rows to stay fast in the interpreter.
COVERAGE_SIZES = [(7, 50), (33, 300), (70, 24), (9, 1000), (3, 2000), (2, 4000), (2, 8000), (2, 16000), (2, 20000)]
SAMPLE_SIZES = [(7, 50), (33, 300), (70, 24), (5, 16), (9, 400), (1, 130)]

# Genes that only act in a looped kernel: cover them there.
LOOPED_ONLY = ("keep_x", "stats")


def base_genome(op: Operator, problem: Problem, **genes: Any) -> Genome:
    """A valid genome: the family's base updated by `genes` (single pass by default), checked valid."""
    values = op.family.base(BLOCK=op.family.single_block(problem), num_warps=4)
    values.update(genes)
    g = op.family.make(values)
    assert not op.family.violations(g, problem, TEST_TARGET), op.family.violations(g, problem, TEST_TARGET)
    return g


def base_source(op: Operator, problem: Problem, **genes: Any) -> str:
    return op.render(base_genome(op, problem, **genes), problem, TEST_TARGET)


def coverage_cases(op: Operator, dtype: str) -> list[tuple[Problem, Genome]]:
    """For every value of every gene, one valid (problem, genome) holding that value, on the cheapest problem
    where repair keeps it. Raises if some value cannot be placed (the domain would hold a dead value)."""
    family = op.family
    rng = np.random.default_rng(0)
    cases: dict[str, tuple[Problem, Genome]] = {}
    for name, gene in family.genes.items():
        for value in gene.values:
            found = None
            modes = ("looped",) if name in LOOPED_ONLY else ("single", "looped")
            for sizes in COVERAGE_SIZES:
                p = op.problem(sizes, dtype)
                for mode in modes:
                    raw = family.base(BLOCK=family.single_block(p), mode=mode, num_warps=4)
                    raw[name] = value
                    raw = {k: family.genes[k].nearest(v) for k, v in raw.items()}
                    try:
                        g = family.repair(family.make(raw), p, TEST_TARGET, rng)
                    except InvalidGenome:
                        continue
                    if g[name] == value and (name not in LOOPED_ONLY or g["mode"] == "looped"):
                        found = (p, g)
                        break
                if found:
                    break
            if found is None:
                raise AssertionError(f"{family.name}: no test problem keeps {name}={value!r}")
            cases.setdefault(f"{found[0].key}|{found[1].hash}", found)
    return list(cases.values())


def sample_cases(op: Operator, dtype: str, per_problem: int, seed: int) -> list[tuple[Problem, Genome]]:
    rng = np.random.default_rng(seed)
    out = []
    for sizes in SAMPLE_SIZES:
        p = op.problem(sizes, dtype)
        out += [(p, op.family.random(rng, p, TEST_TARGET)) for _ in range(per_problem)]
    return out


def relative_error(out: Any, ref: Any) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm())


def run_case(op: Operator, problem: Problem, genome: Genome, seed: int = 0) -> float:
    """Render, load and run one kernel in the interpreter; its relative error against the reference."""
    import torch

    module = load_source(op.render(genome, problem, TEST_TARGET))
    inputs = op.make_inputs(problem, seed, device="cpu")
    out = getattr(module, op.entry)(*inputs)
    assert out.shape == inputs[0].shape and out.dtype == inputs[0].dtype
    assert bool(torch.isfinite(out).all()), f"non-finite output from {genome}"
    return relative_error(out, op.reference(*inputs))
