"""Every golden Triton GEMM genome (tests/golden: gemm and its epilogue variants) and seeded random valid genomes,
rendered now and run in the Triton interpreter: the output must match the torch reference within the operator's
tolerance. A golden genome is rendered for its own (large) problem and run on a small one of the same alignment
class (N and K modulo 16, so the same row-alignment, padding and descriptor paths run), in fp16 (fp32 for fp32
goldens): the interpreter runs neither bf16 nor large shapes. Gluon genomes run on GPUs only (tests/gpu)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from genomes.base import InvalidGenome
from tests.golden.goldens import MANIFEST

# operator -> (small problem, dtype) on which seeded random genomes run
RANDOM_PROBLEMS = {"gemm": [((67, 45, 93), "fp16"), ((67, 40, 88), "fp32"), ((40, 48, 272), "fp16")],
                   "gemm+bias+gelu": [((67, 40, 88), "fp16")], "gemm+swiglu": [((33, 40, 96), "fp16")],
                   "gemm+scale+bias+gelu+residual": [((40, 48, 96), "fp32")],
                   "gemm+relu+residual": [((67, 45, 93), "fp16")]}
RANDOM_PER_PROBLEM = 5


def _goldens() -> list[tuple[str, str, tuple[int, ...], str, str]]:
    """(id, operator, sizes, dtype, canonical genome) of each Triton golden of gemm and its variants."""
    out = []
    for e in json.loads(MANIFEST.read_text()) if MANIFEST.exists() else []:
        if e["operator"].split("+")[0] == "gemm" and not e["export"] and '"backend":"gluon"' not in e["genome"]:
            out.append((e["file"].removesuffix(".py.golden"), e["operator"], tuple(e["sizes"]), e["dtype"],
                        e["genome"]))
    return out


def _small(sizes: tuple[int, ...], dtype: str) -> tuple[tuple[int, int, int], str]:
    m, n, k = sizes
    return (min(m, 67), 32 + n % 16 + 16 * (n % 16 == 0), 64 + k % 16), "fp32" if dtype == "fp32" else "fp16"


def _relative_error(op, module, problem) -> float:
    inputs = op.make_inputs(problem, 1, device="cpu")
    out = module.matmul(*inputs)
    ref = op.reference(*inputs)
    return float("inf") if torch.isnan(out).any() else float((out.float() - ref).norm() / ref.norm())


GOLDENS = _goldens()


def test_the_goldens_hold_triton_gemm_genomes():
    assert len(GOLDENS) >= 40 and len({g[1] for g in GOLDENS}) >= 8


@pytest.mark.slow
@pytest.mark.parametrize("name, operator, sizes, dtype, genome", GOLDENS, ids=[g[0] for g in GOLDENS])
def test_a_golden_genome_matches_the_reference(name, operator, sizes, dtype, genome):
    op = operators.get(operator)
    source = op.render(op.family.from_canonical(genome), op.problem(sizes, dtype), HOPPER)
    problem = op.problem(*_small(sizes, dtype))
    assert _relative_error(op, load_source(source), problem) <= op.tolerance(problem), name


def _random_cases() -> list[tuple[str, str, tuple[int, ...], str, int]]:
    return [(f"{name}-{'x'.join(map(str, sizes))}-{dtype}-{i}", name, sizes, dtype, i)
            for name, problems in RANDOM_PROBLEMS.items() for sizes, dtype in problems
            for i in range(RANDOM_PER_PROBLEM)]


@pytest.mark.slow
@pytest.mark.parametrize("case, operator, sizes, dtype, index", _random_cases(), ids=[c[0] for c in _random_cases()])
def test_a_random_genome_matches_the_reference(case, operator, sizes, dtype, index):
    op = operators.get(operator)
    problem = op.problem(sizes, dtype)
    rng = np.random.default_rng([43, index, sum(sizes)])
    for _ in range(200):  # the first valid Triton genome of this draw
        try:
            genome = op.family.random(rng, problem, HOPPER)
        except InvalidGenome:
            continue
        if genome["backend"] == "triton":
            break
    else:
        pytest.fail(f"no valid Triton genome drawn for {problem.key}")
    module = load_source(op.render(genome, problem, HOPPER))
    assert _relative_error(op, module, problem) <= op.tolerance(problem), str(genome)
