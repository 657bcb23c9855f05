"""Recorded behaviour of the genome families: `violations()` and `repair()` over thousands of seeded genomes.

A family's rules moved onto its rule table (genomes/rule_table.py) must keep every verdict and every repair:
this module draws, for each case (a family as an operator builds it, over problems and targets that reach its
rules), genomes valid and invalid through the family's own means (uniform raw draws, `random`, seeds, and the
search's mutators and crossovers applied without repair), and records for each the messages of `violations()`,
the genome `repair()` returns (or the InvalidGenome it raises) and the next draw of the generator it was given
(so a repair that draws its coins differently shows). tests/genomes/test_family_behaviour.py compares the live
families with the recordings kept under tests/genomes/behaviour/.

Regenerate (only when a family's rules change on purpose; say what changed in the commit):
    python -m tests.genomes.behaviour [CASE ...]
"""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evo.mutators import GroupCrossover, MultiGeneMutation, PointMutation, UniformCrossover
from evo.problem import HOPPER, INTERPRETED_HOPPER, Problem, Target
from genomes.attention import AttentionFamily
from genomes.base import Genome, GenomeFamily, InvalidGenome
from genomes.gemm import GemmFamily
from genomes.rmsnorm import RMSNormFamily
from genomes.softmax import SoftmaxFamily

__all__ = ["CASES", "Case", "record", "recorded", "path"]

HERE = Path(__file__).with_name("behaviour")
AMPERE = Target("a100", 80, 166912, 108)


def _gemm(m: int, n: int, k: int, dtype: str = "bf16") -> Problem:
    return Problem.make("gemm", ("M", "N", "K"), (m, n, k), dtype)


_ATT = ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim")


def _attention(sizes: tuple[int, ...], dtype: str = "bf16", causal: bool = False) -> Problem:
    return Problem.make("attention+causal" if causal else "attention", _ATT, sizes, dtype)


GEMM_PROBLEMS = (_gemm(4096, 4096, 4096), _gemm(1000, 3000, 2000, "fp16"), _gemm(16, 4096, 4096, "fp32"),
                 _gemm(67, 45, 93, "fp16"), _gemm(128, 4096, 14336), _gemm(1, 1, 1, "fp32"),
                 _gemm(20, 16, 4096, "fp16"), _gemm(768, 768, 49152), _gemm(3000, 3000, 3000, "bf16"),
                 _gemm(256, 1000, 333), _gemm(64, 2**21, 64))
ATTENTION_PROBLEMS = (_attention((4, 32, 8, 1, 8192, 128)), _attention((1, 32, 32, 4096, 4096, 64), "fp16"),
                      _attention((2, 12, 4, 37, 301, 80), "fp16"), _attention((1, 8, 8, 1, 100, 64), "fp16"),
                      _attention((1, 16, 16, 2048, 2048, 128), causal=True), _attention((1, 8, 2, 512, 512, 256)),
                      _attention((2, 8, 8, 300, 300, 64), "fp32"), _attention((1, 12, 8, 1, 64, 64), "fp16"))
TARGETS = (HOPPER, AMPERE, INTERPRETED_HOPPER)


def _rowwise_problems(name: str) -> tuple[Problem, ...]:
    sizes = ((4096, 4096, "bf16"), (8, 151936, "bf16"), (1, 32000, "fp16"), (100000, 16, "fp32"), (37, 1000, "fp16"),
             (4, 262144, "bf16"), (2048, 50304, "fp32"), (3, 5, "fp32"))
    return tuple(Problem.make(name, ("rows", "cols"), (m, n), dtype) for m, n, dtype in sizes)


@dataclass(frozen=True)
class Case:
    """A family as an operator builds it (`make`), and the problems its genomes are drawn and judged for."""

    name: str
    make: Callable[[], GenomeFamily]
    problems: tuple[Problem, ...]
    targets: tuple[Target, ...] = TARGETS
    per_problem: int = 60  # genomes of each kind drawn per (problem, target)
    # a restricted family's unrestricted one: its genomes, outside the restricted domains, are judged too (an elite
    # transferred from a run restricted otherwise)
    wider: Callable[[], GenomeFamily] | None = None


_RESIDUAL = "gave wrong results with an epilogue that reads a residual or a scale (Triton 3.6, sm_90)"
CASES = {case.name: case for case in (
    Case("gemm", GemmFamily, GEMM_PROBLEMS),
    Case("gemm_swiglu", lambda: GemmFamily(b_tiles=2), GEMM_PROBLEMS, per_problem=25),
    Case("gemm_residual", lambda: GemmFamily(reads_tile=True, ws_refusal=_RESIDUAL), GEMM_PROBLEMS, per_problem=25),
    Case("gemm_no_gluon", lambda: GemmFamily(gluon_refusal="is not written for this epilogue"), GEMM_PROBLEMS,
         per_problem=15),
    Case("gemm_restricted", lambda: GemmFamily({"persistent": [True], "split_k": [2, 3, 4], "num_warps": [4, 8],
                                                "memory": ["descriptor", "host_descriptor"]}), GEMM_PROBLEMS,
         per_problem=20, wider=GemmFamily),
    Case("gemm_gluon_only", lambda: GemmFamily({"backend": ["gluon"], "consumers": [2, 3]}), GEMM_PROBLEMS,
         per_problem=20, wider=GemmFamily),
    Case("gemm_pinned", lambda: GemmFamily({"memory": ["pointer", "descriptor"], "num_warps": [8], "split_k": [1]}),
         GEMM_PROBLEMS, per_problem=15, wider=GemmFamily),
    Case("attention", AttentionFamily, ATTENTION_PROBLEMS),
    Case("attention_gluon_only", lambda: AttentionFamily({"backend": ["gluon"], "num_stages": [1, 2]}),
         ATTENTION_PROBLEMS, per_problem=20, wider=AttentionFamily),
    Case("softmax", SoftmaxFamily, _rowwise_problems("softmax")),
    Case("rmsnorm", RMSNormFamily, _rowwise_problems("rmsnorm")),
    Case("rmsnorm_restricted", lambda: RMSNormFamily({"ROWS": [2, 4], "persistent": [1, 2], "mode": ["single"]}),
         _rowwise_problems("rmsnorm"), per_problem=20, wider=RMSNormFamily),
    Case("softmax_restricted", lambda: SoftmaxFamily({"split": [4, 8], "split_mode": ["cooperative"],
                                                      "num_warps": [16, 32]}),
         _rowwise_problems("softmax"), per_problem=20, wider=SoftmaxFamily),
)}


def _raw(family: GenomeFamily, rng: np.random.Generator) -> Genome:
    return family.make({name: gene.random(rng) for name, gene in family.genes.items()})


def genomes(case: Case, family: GenomeFamily, problem: Problem, target: Target, rng: np.random.Generator
            ) -> Iterator[Genome]:
    """The genomes judged for one (problem, target): raw draws, valid draws, seeds, and unrepaired children of the
    valid ones by each mutator (most break one rule or two: the rules' edges)."""
    valid: list[Genome] = []
    for _ in range(case.per_problem):
        yield _raw(family, rng)
        try:
            drawn = family.random(rng, problem, target)
        except InvalidGenome:
            continue
        valid.append(drawn)
        yield drawn
    try:
        seeds = family.seeds(problem, target)
    except InvalidGenome:
        seeds = []
    yield from seeds
    valid += seeds
    if not valid:
        return
    one = (PointMutation(), MultiGeneMutation(2, 4))
    two = (UniformCrossover(), GroupCrossover())
    for i in range(2 * case.per_problem):
        parent = valid[int(rng.integers(len(valid)))]
        if i % 3 == 2:
            mate = valid[int(rng.integers(len(valid)))]
            yield two[i % 2].vary([parent, mate], family, rng)
        else:
            yield one[i % 2].vary([parent], family, rng)
    if case.wider is not None:  # genomes outside the restricted domains
        wider = case.wider()
        for _ in range(case.per_problem):
            yield family.unchecked(_raw(wider, rng).as_dict())
            try:
                yield family.unchecked(wider.random(rng, problem, target).as_dict())
            except InvalidGenome:
                pass


def record(case: Case) -> Iterator[list[Any]]:
    """One row per judged genome: problem, target, the genome's hash, its violations, what repair made of it (a
    genome hash, or "InvalidGenome: <message>") and the repair generator's next draw."""
    family = case.make()
    for p_index, problem in enumerate(case.problems):
        for t_index, target in enumerate(case.targets):
            rng = np.random.default_rng([p_index, t_index, 43])
            for i, genome in enumerate(genomes(case, family, problem, target, rng)):
                reasons = family.violations(genome, problem, target)
                coins = np.random.default_rng([p_index, t_index, i])
                try:
                    repaired = family.repair(genome, problem, target, coins).hash
                except InvalidGenome as e:
                    repaired = f"InvalidGenome: {e}"
                yield [problem.key, target.name, genome.hash, reasons, repaired, int(coins.integers(2**31))]


def path(name: str) -> Path:
    return HERE / f"{name}.jsonl.gz"


def recorded(name: str) -> list[list[Any]]:
    with gzip.open(path(name), "rt") as f:
        return [json.loads(line) for line in f]


def write(name: str) -> int:
    HERE.mkdir(exist_ok=True)
    rows = list(record(CASES[name]))
    # mtime=0: the same rows give the same bytes, so a regeneration that changes nothing shows no diff
    with open(path(name), "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows).encode())
    return len(rows)


def main(argv: list[str]) -> int:
    names = argv or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown cases {unknown}; cases are {sorted(CASES)}", file=sys.stderr)
        return 2
    for name in names:
        print(f"{name}: {write(name)} genomes recorded in {path(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
