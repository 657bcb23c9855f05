"""One elite: the archive's best on one GPU model and versions, the same for status, report, export and bench
(bench's finalists are `ranked`'s first few). Rows are made-up TEST DATA."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.archive.elite import best_evaluation, best_kernels, problem_archive, ranked
from evo.evaluate.modules import source_hash
from evo.problem import HOPPER
from evo.store.record import Evaluation
from evo.store.sqlite import Store
from evo.surface.export import find_best
from evo.surface.status import run_status

OP = operators.get("gemm")
PROBLEM = OP.problem((64, 64, 64), "fp16")


def genomes(n):
    rng = np.random.default_rng(3)
    out = list(OP.family.seeds(PROBLEM, HOPPER))
    while len(out) < n:
        out.append(OP.family.random(rng, PROBLEM, HOPPER))
    return out[:n]


def row(genome, ms, status="ok", gpu="G", versions=None, base=1.0):
    source = OP.render(genome, PROBLEM, HOPPER)
    ok = status == "ok"
    return Evaluation(operator="gemm", problem_key=PROBLEM.key, problem=PROBLEM.to_json(), genome=genome.canonical(),
                      genome_hash=genome.hash, source_hash=source_hash(source), status=status, gpu=gpu,
                      versions=versions or {"triton": "t"}, median_ms=ms if ok else None,
                      baseline_ms=base if ok else None, worker="test-data")


@pytest.fixture
def store(tmp_path):
    g = genomes(5)
    with Store(tmp_path / "store.sqlite") as s:
        s.add(row(g[0], 2.0))
        s.add(row(g[1], 1.0, base=0.5))  # fastest on G (ratio 0.5: the ratio does not decide)
        s.add(row(g[1], 1.1))  # the same kernel again: one entry per source
        s.add(row(g[2], 0.1, gpu="other"))  # faster, on another GPU model
        s.add(row(g[3], 0.2, versions={"triton": "older"}))  # faster, other software versions
        s.add(row(g[4], None, status="wrong"))
        s.add(row(g[0], 2.0))  # the latest correct row names the GPU and versions: G, triton t
        yield s, g


def test_ranked_is_the_archive_best_first_on_one_gpu_and_versions(store):
    s, g = store
    found = ranked(s, PROBLEM)
    assert [e.genome_hash for e in found] == [g[1].hash, g[0].hash]
    assert len({e.source_hash for e in found}) == len(found)
    assert all(e.gpu == "G" and e.versions == {"triton": "t"} for e in found)
    assert best_evaluation(s, PROBLEM).genome_hash == g[1].hash
    assert best_evaluation(s, PROBLEM, gpu="other").genome_hash == g[2].hash  # a GPU asked for, when it measured
    assert best_evaluation(s, PROBLEM, gpu="nowhere").genome_hash == g[1].hash
    archive = problem_archive(s, PROBLEM)
    assert archive.evaluations == 5  # failures count wherever they ran; other GPUs' timings do not
    assert archive.best.genome_hash == g[1].hash


def test_status_export_and_the_run_name_the_same_elite(store):
    s, g = store
    (status,) = run_status(s)
    best = best_evaluation(s, PROBLEM)
    assert status.best == pytest.approx(OP.throughput(PROBLEM, best.median_ms))
    assert status.ratio == pytest.approx(best.ratio)
    assert find_best(s, PROBLEM.key).id == best.id
    (named,) = best_kernels(s)
    assert named.problem == PROBLEM and named.evaluation.id == best.id
