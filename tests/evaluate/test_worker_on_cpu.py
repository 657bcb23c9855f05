"""The GPU child's evaluation code, driven in-process on the CPU (interpreter, device "cpu") with a stand-in
for the CUDA-event timing: every status path of gpu_evaluate short of a real GPU."""

import pytest

from evo.evaluate.candidate import CompileResult
from evo.evaluate.supervisor import ExitAfter
from evo.evaluate.timing import Timing
from evo.evaluate.worker import GpuState, gpu_evaluate
from evo.experiment.spec import EvaluationSpec
from evo.store.record import Evaluation
from tests.fixtures.faulty_operator import FaultyOperator, candidate

OP = FaultyOperator()


@pytest.fixture
def timed(monkeypatch):
    """Stand-in timing (test data, not a measurement): runs each function once and records the call."""
    calls = []

    def fake(fns, **kwargs):
        calls.append(len(fns))
        for fn in fns:
            fn()
        return [Timing(1.0 + i, 0.1, [1.0 + i] * 5) for i in range(len(fns))]

    monkeypatch.setattr("evo.evaluate.timing.time_interleaved", fake)
    return calls


def state(objective="gpu"):
    return GpuState(0, EvaluationSpec(objective=objective), device="cpu")


def evaluate(st, fault, n=256, seed=5, compiled=None):
    cand = candidate(fault, n=n, block=256)
    cand.compiled, cand.seed = compiled, seed
    return gpu_evaluate(st, cand)


def test_ok_is_checked_then_timed_against_the_baseline(timed):
    compiled = CompileResult("ok", resources={"shared": 0, "registers": 20}, compile_s=0.25)
    ev = evaluate(state(), "none", compiled=compiled)
    assert isinstance(ev, Evaluation) and ev.status == "ok", ev.reason
    assert ev.median_ms == 1.0 and ev.baseline_ms == 2.0 and ev.baseline == "torch" and ev.ratio == 2.0
    assert ev.max_rel_error < 1e-6 and ev.compile_s == 0.25 and ev.resources["registers"] == 20
    assert ev.resources["eval"]["seed"] == 5
    assert timed == [2]  # candidate and baseline interleaved in one measurement
    # the user's clocks are measured beside the GPU time, and the objective says which one is the fitness
    assert ev.objective == "gpu" and ev.call_ms > 0 and ev.baseline_call_ms > 0 and ev.host_us > 0
    on_call = evaluate(state("call"), "none", compiled=compiled)
    assert on_call.objective == "call" and on_call.ratio == on_call.baseline_call_ms / on_call.call_ms


@pytest.mark.parametrize("fault,status", [("wrong", "wrong"), ("nan", "nan"), ("unwritten", "nan"),
                                          ("syntax", "compile_error"), ("compile", "compile_error"),
                                          ("raise", "error")])
def test_faults_become_statuses(timed, fault, status):
    ev = evaluate(state(), fault)
    assert not isinstance(ev, ExitAfter)
    assert ev.status == status, ev.reason
    assert ev.median_ms is None and timed == []  # nothing wrong is ever timed


def test_every_candidate_gets_its_own_baseline_timing(timed):
    st = state()
    first = evaluate(st, "none", n=128)
    second = evaluate(st, "none", n=128, seed=6)
    assert timed == [2, 2]  # the baseline is timed beside each candidate, never reused from an earlier one
    assert first.baseline_ms == second.baseline_ms == 2.0


def test_the_worker_is_named_by_the_machine_s_gpu_number(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # what a child of GPU 3 sees (GpuWorker sets it)
    assert ":gpu3:pid" in state().worker
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5273c116")  # a UUID says nothing short: the index instead
    assert ":gpu0:pid" in state().worker
