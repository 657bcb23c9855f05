"""Every evaluation records the user's clocks beside the GPU time: the GPU child measures the per-call and host
times of the kernel and its baseline and names the experiment's objective; the smoke evaluator's stand-in serves as
every clock; a served row is judged by the serving experiment's objective; rows timed before the clocks existed
are never served. Times from the stand-ins below are TEST DATA, not measurements."""

import pytest

from evo.evaluate import clocks, pipeline, timing
from evo.evaluate.smoke import smoke_evaluate, smoke_setup
from evo.evaluate.timing import Timing
from evo.evaluate.worker import GpuState, gpu_evaluate
from evo.experiment.spec import EvaluationSpec
from evo.problem import HOPPER
from evo.store.sqlite import Store
from tests.fixtures.faulty_operator import FaultyOperator, candidate

OP = FaultyOperator()


@pytest.fixture
def stand_in_clocks(monkeypatch):
    """GPU time 1.0 (kernel) and 2.0 ms (baseline); call time 3.0 and 1.5 ms; host 40 and 20 us: the kernel wins
    on the GPU and loses per call."""
    seen = {}

    def fake_timing(fns, **kwargs):
        return [Timing(1.0 + i, 0.1, [1.0 + i] * 5) for i in range(len(fns))]

    def fake_call(fns, **kwargs):
        seen["call"] = (len(fns), kwargs.get("device"))
        return [3.0, 1.5]

    def fake_host(fns, **kwargs):
        seen["host"] = (len(fns), kwargs.get("device"))
        return [40.0, 20.0]

    monkeypatch.setattr("evo.evaluate.timing.time_interleaved", fake_timing)
    monkeypatch.setattr("evo.evaluate.clocks.call_ms", fake_call)
    monkeypatch.setattr("evo.evaluate.clocks.host_us", fake_host)
    return seen


def _evaluate(objective):
    cand = candidate("none", n=256, block=256)
    cand.seed = 3
    return gpu_evaluate(GpuState(0, EvaluationSpec(objective=objective), device="cpu"), cand)


@pytest.mark.parametrize("objective,ratio", [("call", 0.5), ("gpu", 2.0)], ids=["call_clock", "gpu_clock"])
def test_the_gpu_child_records_every_clock_and_the_objective(stand_in_clocks, objective, ratio):
    ev = _evaluate(objective)
    assert ev.status == "ok", ev.reason
    assert (ev.median_ms, ev.baseline_ms, ev.call_ms, ev.baseline_call_ms) == (1.0, 2.0, 3.0, 1.5)
    assert (ev.host_us, ev.baseline_host_us) == (40.0, 20.0)
    assert ev.objective == objective and ev.ratio == pytest.approx(ratio)
    assert stand_in_clocks == {"call": (2, "cpu"), "host": (2, "cpu")}  # kernel and baseline, on the child's device
    assert "clocks_s" in ev.resources["eval"]


def test_a_failed_check_measures_no_clock(stand_in_clocks):
    cand = candidate("wrong", n=256, block=256)
    ev = gpu_evaluate(GpuState(0, EvaluationSpec(), device="cpu"), cand)
    assert ev.status == "wrong" and ev.call_ms is None and ev.host_us is None and stand_in_clocks == {}


def test_the_clocks_run_on_the_cpu_too():
    """The interpreter device has no queue to wait for: the clocks time the calls themselves."""
    calls = []
    fns = [lambda: calls.append(1)]
    (per_call,) = clocks.call_ms(fns, rounds=2, device="cpu")
    (host,) = clocks.host_us(fns, reps=3, device="cpu")
    assert per_call > 0 and host > 0 and len(calls) > 2 * 8  # every round holds at least `lo` calls


def test_a_slow_call_is_timed_in_few_calls():
    """A 20 ms call: two calls a round and two a burst, where eight each took most of a slow kernel's evaluation
    (the GPU worker's clocks phase); a fast call still fills its rounds and bursts."""
    import time as _time

    slow, fast = [], []

    def sleeper():
        slow.append(1)
        _time.sleep(0.02)

    (per_call,) = clocks.call_ms([sleeper], rounds=3, warmup=1, device="cpu")
    assert per_call >= 20 and len(slow) == 1 + 1 + 3 * 2  # warm-up, the sizing call, three rounds of two
    slow.clear()
    (host,) = clocks.host_us([sleeper], reps=3, warmup=1, device="cpu")
    assert host >= 20e3 and len(slow) == 1 + 1 + 3 * 2
    clocks.host_us([lambda: fast.append(1)], reps=3, warmup=1, device="cpu")
    assert len(fast) == 1 + 1 + 3 * 8  # the full burst
    assert clocks.calls_per_round(0.01) == 200 and clocks.calls_per_round(1.0) == 5 and clocks.calls_per_round(50) == 2


@pytest.mark.parametrize("objective", ["call", "gpu"], ids=["call_clock", "gpu_clock"])
def test_a_smoke_row_has_a_fitness_under_either_objective(objective):
    state, info = smoke_setup(HOPPER, objective)
    cand = candidate("none", n=1 << 12)
    ev = smoke_evaluate(state, cand)
    assert ev.status == "ok", ev.reason
    cost = OP.smoke_cost(cand.genome, cand.problem)
    assert ev.objective == objective and ev.call_ms == ev.median_ms == pytest.approx(cost)
    assert ev.fitness_ms == pytest.approx(cost) and ev.baseline_call_ms == ev.baseline_ms and ev.host_us is None
    failed = smoke_evaluate(state, candidate("wrong", n=1 << 12))
    assert failed.status == "wrong" and failed.objective == objective and failed.call_ms is None


def test_a_served_row_is_judged_by_the_serving_experiment():
    measured = candidate("none", n=256).row("ok", median_ms=1.0, baseline_ms=2.0, call_ms=3.0,
                                            baseline_call_ms=1.5, gpu="G", objective="gpu")
    measured.id = 7
    info = type("Info", (), {"gpu": "G", "versions": {}})()
    other = candidate("none", n=256, origin="mutate")
    served = pipeline.look_up(other, lambda *key: measured, info, "call")
    assert served.objective == "call" and served.fitness_ms == 3.0 and served.ratio == pytest.approx(0.5)
    assert pipeline.look_up(other, lambda *key: measured, info).objective == "gpu"  # None: the row's own
    gpu_only = candidate("none", n=256).row("ok", median_ms=1.0, baseline_ms=2.0, gpu="G")  # a stand-in's row
    assert pipeline.look_up(other, lambda *key: gpu_only, info, "call").objective == "gpu"


def test_rows_timed_before_the_clocks_are_never_served(tmp_path):
    assert timing.PROTOCOL != "events+l2-flush-read" and "call-host" in timing.PROTOCOL
    now = GpuState(0, EvaluationSpec(), device="cpu").versions
    assert now["timing"] == timing.PROTOCOL
    old = dict(now, timing="events+l2-flush-read")
    cand = candidate("none", n=256)
    with Store(tmp_path / "s.sqlite") as store:
        store.add(cand.row("ok", median_ms=1.0, baseline_ms=2.0, gpu="G", versions=old))
        assert store.lookup(cand.source_hash, cand.problem.key, "G", old) is not None
        assert store.lookup(cand.source_hash, cand.problem.key, "G", now) is None
