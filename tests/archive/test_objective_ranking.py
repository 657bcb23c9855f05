"""The archive ranks by the objective's clock (Evaluation.fitness_ms): under "call" a kernel quicker per call but
slower on the GPU wins its cell and the problem; under "gpu" the other one does. Rows are made-up TEST DATA."""

from __future__ import annotations

import pytest

import operators
from evo.archive.elite import best_evaluation, problem_archive, ranked
from evo.archive.grid import GridArchive
from evo.archive.status import AddStatus
from evo.evaluate.modules import source_hash
from evo.problem import HOPPER
from evo.store.record import Evaluation
from evo.store.sqlite import Store

OP = operators.get("gemm")
PROBLEM = OP.problem((64, 64, 64), "fp16")
GENOME = OP.family.seeds(PROBLEM, HOPPER)[0]


def row(name, gpu_ms, call_ms, objective, host_us=5.0):
    """`name` stands for a kernel source; both rows share one genome, hence one cell."""
    return Evaluation(operator="gemm", problem_key=PROBLEM.key, problem=PROBLEM.to_json(), genome=GENOME.canonical(),
                      genome_hash=GENOME.hash, source_hash=source_hash(name), status="ok", gpu="G",
                      versions={"triton": "t"}, median_ms=gpu_ms, baseline_ms=1.0, call_ms=call_ms,
                      baseline_call_ms=1.0, host_us=host_us, baseline_host_us=4.0, objective=objective,
                      worker="test-data")


GPU_FAST = ("gpu-fast", 0.5, 2.0)  # quick on the GPU, slow per call (a heavy launch)
CALL_FAST = ("call-fast", 0.8, 1.0)


@pytest.mark.parametrize("objective,winner", [("call", "call-fast"), ("gpu", "gpu-fast")],
                         ids=["call_clock", "gpu_clock"])
def test_the_cell_goes_to_the_faster_on_the_objective_s_clock(objective, winner):
    archive = GridArchive.for_problem(OP, PROBLEM)
    archive.add([row(*GPU_FAST, objective), row(*CALL_FAST, objective)])
    (best,) = archive.elites()
    assert best.source_hash == source_hash(winner)
    ms = best.call_ms if objective == "call" else best.median_ms
    assert best.fitness_ms == ms and best.throughput == pytest.approx(OP.throughput(PROBLEM, ms))
    assert best.ratio == pytest.approx(1.0 / ms) and best.host_us == 5.0


def test_a_correct_row_without_its_objective_s_clock_is_no_elite():
    archive = GridArchive.for_problem(OP, PROBLEM)
    (result,) = archive.add([row("no-call-clock", 0.5, None, "call")])
    assert len(archive) == 0 and archive.evaluations == 1 and result.status == AddStatus.NOT_ADDED


def test_the_elite_is_judged_by_the_latest_objective(tmp_path):
    """A run resumed under the call objective (allowed changes): its earlier GPU-judged rows are judged by the
    call clock too, never one clock against the other."""
    with Store(tmp_path / "s.sqlite") as store:
        store.add(row(*GPU_FAST, "gpu"))
        store.add(row(*CALL_FAST, "gpu"))
        assert best_evaluation(store, PROBLEM).source_hash == source_hash("gpu-fast")
        store.add(row("later", 3.0, 3.0, "call"))
        found = ranked(store, PROBLEM)
        assert found[0].source_hash == source_hash("call-fast") and found[0].objective == "call"
        assert problem_archive(store, PROBLEM).best.fitness_ms == 1.0
