"""The driver LOAD TEST (benchmarks.driver_load) run briefly on an embedded Ray: fake GPUs that hold each
candidate for a recorded time, with compiles slower than measurements (as GEMM's are on an H200). With the
executor's old fixed window of 2 x GPUs + 2 candidates in flight, compiles starved a second GPU; the window is
now sized from the measured latencies (how much that buys is the load test's report, not a timed test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.driver_load import run_matrix
from benchmarks.loadtest import LOADTEST_GPU, LOADTEST_NOTE, LoadTestBackend
from evo.evaluate import Candidate

REPO = Path(__file__).resolve().parents[2]


def test_loadtest_rows_are_marked_and_never_a_timing():
    import operators
    from evo.evaluate.pipeline import render
    from evo.problem import HOPPER

    op = operators.get("gemm", {})
    problem = op.problem((4096, 4096, 4096), "bf16")
    cand = Candidate(problem, op.family.seeds(problem, HOPPER)[0], op, "seed", (), 1)
    render(cand, HOPPER)
    backend = LoadTestBackend(eval_s=0.0, compile_s=(0.0, 0.0))
    assert backend.compile(cand, HOPPER).ok
    ev = backend.open_worker(0).evaluate(cand, 60.0)
    assert ev.gpu == LOADTEST_GPU and ev.baseline == "loadtest" and ev.reason == LOADTEST_NOTE
    assert "LOAD TEST" in ev.reason and "not a timing" in ev.reason


@pytest.mark.slow
def test_two_fake_gpus_get_a_wider_window(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.chdir(REPO)
    # 5 candidates a second per fake GPU; compiles of 0.6 s (3 x a measurement), in sleeping tasks
    backend = LoadTestBackend(eval_s=0.2, compile_s=(0.6, 0.6))
    one, two = run_matrix([1, 2], seconds=3.0, backend=backend, compile_workers=None, profile=False, num_cpus=6,
                          warmup_s=1.5)
    assert one["statuses"] == {"ok": one["evaluations"]} and one["gpu_evaluated"] == one["evaluations"]
    assert one["per_minute"] > 0.5 * one["ideal_per_minute"]
    # what says whether the driver keeps up: its CPU per candidate, the search thread's share, the box's load
    assert 0 < one["search_thread_cpu_share"] <= one["driver_cpu_share"] and one["driver_cpu_ms_per_candidate"] > 0
    assert len(one["load_average_1min"]) == 2 and sum(one["proposed"].values()) <= one["evaluations_with_warmup"]
    assert set(one["proposed"]) == {"variation", "guided", "exploit", "restart"}  # by emitter, surrogate on
    # the window grew past the old fixed one of 2 x GPUs + 2; what that buys (1.9x one fake GPU on a quiet machine,
    # 1.3x in a loaded CI run of 3 s) is the load test's figure, in reports/gpu/driver-load-simulated.md, not a
    # timed test's
    assert two["slots"] > 2 * 2 + 2
    assert two["statuses"] == {"ok": two["evaluations"]} and two["evaluations"] > 0


def test_the_llm_problem_set_is_llm_gemm_yaml_with_or_without_the_surrogate():
    from benchmarks.driver_load import PROBLEM_SETS, loadtest_experiment
    from evo.experiment.config import load_experiment

    llm = load_experiment(REPO / "experiments" / "llm_gemm.yaml")
    exp = loadtest_experiment(50.0, problems="llm", problem_evaluations=40)
    assert [p.key for p in exp.problems] == [p.key for p in llm.problems] and len(PROBLEM_SETS["llm"]) == 10
    assert exp.budget.evaluations == 40 and exp.budget.wall_s == 5.0  # each problem: its share of the time
    assert "guided" in [e.name for e in exp.emitters] and not exp.memory.enabled
    assert "guided" not in [e.name for e in loadtest_experiment(10.0, surrogate=False).emitters]
    one = loadtest_experiment(10.0)
    assert [p.key for p in one.problems] == ["gemm:4096x4096x4096:bf16"] and one.budget.evaluations is None
    with pytest.raises(ValueError, match="problems 'all'"):
        loadtest_experiment(10.0, problems="all")
    with pytest.raises(ValueError, match="problem_evaluations 0"):
        loadtest_experiment(10.0, problems="llm", problem_evaluations=0)
