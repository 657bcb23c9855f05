"""The GPU worker's supervision (ChildWorker) with stand-in children: hangs, crashes, raises and lost contexts
are each recorded, the child is replaced when it must be, and no other result is lost or mixed up."""

import pytest

from evo.evaluate.supervisor import ChildDied
from evo.evaluate.worker import ChildWorker, visible_device
from evo.experiment.spec import EvaluationSpec
from tests.fixtures import worker_standins
from tests.fixtures.faulty_operator import candidate


@pytest.fixture(scope="module")
def worker():
    w = ChildWorker(worker_standins.setup, worker_standins.handle, setup_args=("",), seed=0, start_timeout_s=120)
    yield w
    w.close()


@pytest.mark.slow
def test_faults_are_recorded_and_the_worker_replaced(worker):
    plan = [("none", "ok", False), ("hang", "timeout", True), ("none", "ok", False),
            ("launcher_exit", "crashed", True), ("none", "ok", False), ("raise", "error", False),
            ("none", "ok", False), ("oob", "crashed", True), ("wrong", "wrong", False), ("none", "ok", False)]
    results = []
    for i, (fault, expected, replaced) in enumerate(plan):
        cand = candidate(fault, n=1024 + i)  # distinct problems: a result cannot stand in for another
        pid_before = worker.info.name  # names the child's process id
        ev = worker.evaluate(cand, timeout_s=4.0)
        results.append(ev)
        assert ev.status == expected, (fault, ev.reason)
        assert ev.source_hash == cand.source_hash and ev.problem_key == cand.problem.key
        assert ev.gpu == worker_standins.GPU and ev.versions == worker_standins.VERSIONS
        assert (worker.info.name != pid_before) == replaced, fault
    assert worker.restarts == 3
    oks = [ev for ev in results if ev.status == "ok"]
    assert len(oks) == 5 and len({ev.resources["seed"] for ev in oks}) == 5  # a fresh seed for each
    by_fault = {f: ev for (f, _, _), ev in zip(plan, results, strict=True)}
    assert "4 s" in by_fault["hang"].reason and "replaced" in by_fault["hang"].reason
    assert "exit code 7" in by_fault["launcher_exit"].reason
    assert "deliberate failure" in by_fault["raise"].reason


@pytest.mark.slow
def test_evaluate_keeps_compile_facts(worker):
    from evo.evaluate.candidate import CompileResult

    cand = candidate("hang", n=4096)
    cand.compiled = CompileResult("ok", resources={"shared": 1024, "registers": 40}, compile_s=0.5)
    ev = worker.evaluate(cand, timeout_s=2.0)
    assert ev.status == "timeout" and ev.resources["shared"] == 1024 and ev.compile_s == 0.5


@pytest.mark.slow
def test_a_child_that_cannot_start_is_an_error_not_a_result():
    w = ChildWorker(worker_standins.failing_setup, worker_standins.handle, seed=0, start_timeout_s=60)
    try:
        with pytest.raises(ChildDied, match="no GPU here"):
            w.evaluate(candidate("none"))
    finally:
        w.close()


@pytest.mark.slow
def test_recycling_starts_a_fresh_child():
    w = ChildWorker(worker_standins.setup, worker_standins.handle, setup_args=("r",), seed=0, recycle_after=2,
                    start_timeout_s=120)
    try:
        pids = [w.info.name]
        for i in range(3):
            assert w.evaluate(candidate("none", n=64 + i)).status == "ok"
            pids.append(w.info.name)
        assert pids[0] == pids[1] == pids[2] != pids[3]
    finally:
        w.close()


def test_visible_device(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible_device(2) == "2"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert visible_device(1) == "5"
    with pytest.raises(ValueError, match="shows 2 GPUs"):
        visible_device(2)
    with pytest.raises(ValueError):
        visible_device(-1)


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError):
        EvaluationSpec(reps=0)
    with pytest.raises(ValueError):
        EvaluationSpec(budget_ms=0)
    with pytest.raises(ValueError):
        ChildWorker(worker_standins.setup, worker_standins.handle, seed=0, recycle_after=0)
