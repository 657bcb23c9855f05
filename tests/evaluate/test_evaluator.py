"""Evaluator glue: served from the store when measured before, compiled when needed, failed compiles stored
without touching the worker, and every new result stored at once."""

import pytest

from evo.evaluate.candidate import Prepared
from evo.evaluate.compiler import CompileResult
from evo.evaluate.evaluator import Evaluator, failed_compile
from evo.store.sqlite import Store
from tests.fixtures.faulty_operator import candidate


class CountingWorker:
    """An in-process stand-in for GpuWorker: the evaluator only uses gpu, versions and evaluate."""

    gpu = "standin-gpu"
    versions = {"triton": "0", "torch": "0", "cuda": "none"}

    def __init__(self):
        self.calls = []

    def evaluate(self, item, timeout_s=60.0):
        self.calls.append((item, timeout_s))
        return item.candidate.evaluation("ok", gpu=self.gpu, versions=self.versions, median_ms=1.0 + len(self.calls),
                                         baseline_ms=1.0)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "e.db") as s:
        yield s


def test_measured_once_then_served(store):
    worker = CountingWorker()
    ev = Evaluator(worker, store, timeout_s=7.0, run_id="r1")
    cand = candidate("none")
    first = ev.evaluate(cand)
    assert first.status == "ok" and first.id is not None and first.run_id == "r1"
    assert store.count() == 1 and worker.calls[0][1] == 7.0 and not ev.last_served
    again = ev.evaluate(Prepared(cand))
    assert ev.last_served and again.id == first.id and again.median_ms == first.median_ms
    assert len(worker.calls) == 1 and store.count() == 1
    assert ev.stats() == {"served": 1, "measured": 1, "rejected": 0}


def test_remeasure_measures_again(store):
    worker = CountingWorker()
    cand = candidate("none")
    Evaluator(worker, store).evaluate(cand)
    second = Evaluator(worker, store, remeasure=True).evaluate(cand)
    assert len(worker.calls) == 2 and store.count() == 2 and second.median_ms == 3.0


def test_failed_compile_is_stored_without_the_worker(store):
    worker = CountingWorker()
    cand = candidate("smem")
    compiled = CompileResult("out_of_resources", "shared memory 262144 B exceeds 232448 B",
                             resources={"shared": 262144, "registers": 158}, compile_s=1.5)
    ev = Evaluator(worker, store).evaluate(Prepared(cand, compiled))
    assert ev.status == "out_of_resources" and not worker.calls
    assert ev.gpu == worker.gpu and ev.resources["shared"] == 262144 and ev.compile_s == 1.5
    # a static rejection is a property of the kernel on that GPU: served next time, never recompiled
    again = Evaluator(worker, store, compile=lambda c: pytest.fail("compiled again")).evaluate(cand)
    assert again.id == ev.id and store.count() == 1


def test_unprepared_candidates_are_compiled_when_a_compiler_is_given(store):
    worker = CountingWorker()
    seen = []

    def compile_(cand):
        seen.append(cand.source_hash)
        return CompileResult("ok", resources={"shared": 0, "registers": 20})

    ev = Evaluator(worker, store, compile=compile_).evaluate(candidate("none", n=2048))
    assert ev.status == "ok" and len(seen) == 1
    assert worker.calls[0][0].compiled.resources["registers"] == 20


def test_without_a_store_nothing_is_served():
    worker = CountingWorker()
    ev = Evaluator(worker)
    ev.evaluate(candidate("none"))
    ev.evaluate(candidate("none"))
    assert len(worker.calls) == 2


def test_bad_input():
    with pytest.raises(ValueError):
        Evaluator(CountingWorker(), timeout_s=0)
    with pytest.raises(ValueError):
        failed_compile(Prepared(candidate("none"), CompileResult("ok")), "g", {})
