"""The local executor runs the pipeline's stages: served from the store when measured before, compiled when
the backend compiles, failed compiles ended without touching the worker. (The search stores every row it
gets, as `run` below does; the Ray executor runs the same stages in tests/search/test_search_ray.py.)"""

import pytest

from evo.evaluate import Backend, Candidate, CompileResult, LocalExecutor, Worker, WorkerInfo, pipeline
from evo.experiment.spec import EvaluationSpec
from evo.store.sqlite import Store
from tests.fixtures.faulty_operator import FaultyOperator, genome

OP = FaultyOperator()


class CountingWorker(Worker):
    """An in-process stand-in for GpuWorker (made-up timings: test data)."""

    def __init__(self):
        self.calls = []

    @property
    def info(self):
        return WorkerInfo("counting", "standin-gpu", {"triton": "0", "torch": "0", "cuda": "none"})

    def evaluate(self, cand, timeout_s):
        self.calls.append((cand, timeout_s))
        return cand.row("ok", gpu=self.info.gpu, versions=self.info.versions, median_ms=1.0 + len(self.calls),
                        baseline_ms=1.0)


class CountingBackend(Backend):
    needs_gpu = False

    def __init__(self, compile=None):
        self.worker = CountingWorker()
        self._compile = compile

    def compile(self, cand, target):
        return self._compile(cand) if self._compile else None

    def open_worker(self, device_index):
        return self.worker


def fresh(fault="none", n=1024):
    return Candidate(OP.problem((n,), "fp32"), genome(fault), OP, origin="test")


def run(executor, cand, store=None):
    executor.submit(cand)
    ((done, ev),) = executor.poll()
    assert done is cand
    if store is not None:
        store.add(ev)
    return ev


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "e.db") as s:
        yield s


def test_measured_once_then_served(store):
    backend = CountingBackend()
    with LocalExecutor(backend, EvaluationSpec(timeout_s=7.0), lookup=store.lookup) as ex:
        first = run(ex, fresh(), store)
        assert first.status == "ok" and first.id is not None and first.source_hash
        assert store.count() == 1 and backend.worker.calls[0][1] == 7.0
        again = run(ex, fresh(), store)
    assert again.worker == f"store#{first.id}" and again.median_ms == first.median_ms
    assert len(backend.worker.calls) == 1 and again.source_hash == first.source_hash


def test_without_a_lookup_it_measures_again(store):
    backend = CountingBackend()
    with LocalExecutor(backend, lookup=store.lookup) as ex:
        run(ex, fresh(), store)
    with LocalExecutor(backend) as ex:
        second = run(ex, fresh(), store)
    assert len(backend.worker.calls) == 2 and store.count() == 2 and second.median_ms == 3.0


def test_failed_compile_is_stored_without_the_worker(store):
    compiled = CompileResult("out_of_resources", "shared memory 262144 B exceeds 232448 B",
                             resources={"shared": 262144, "registers": 158}, compile_s=1.5)
    backend = CountingBackend(compile=lambda c: compiled)
    with LocalExecutor(backend, lookup=store.lookup) as ex:
        ev = run(ex, fresh("smem"), store)
    assert ev.status == "out_of_resources" and not backend.worker.calls
    assert ev.gpu == "standin-gpu" and ev.resources["shared"] == 262144 and ev.compile_s == 1.5
    # a static rejection is a property of the kernel on that GPU: served next time, never recompiled
    never = CountingBackend(compile=lambda c: pytest.fail("compiled again"))
    with LocalExecutor(never, lookup=store.lookup) as ex:
        again = run(ex, fresh("smem"), store)
    assert again.worker == f"store#{ev.id}" and again.status == "out_of_resources"


def test_compiled_candidates_reach_the_worker_with_what_compiling_found():
    seen = []

    def compile_(cand):
        seen.append(cand.source_hash)
        return CompileResult("ok", resources={"shared": 0, "registers": 20})

    backend = CountingBackend(compile=compile_)
    with LocalExecutor(backend) as ex:
        ev = run(ex, fresh(n=2048))
    assert ev.status == "ok" and len(seen) == 1 and ev.resources["registers"] == 20
    assert backend.worker.calls[0][0].compiled.resources["registers"] == 20


class BuggyRender(FaultyOperator):
    def render(self, genome, problem, target):
        raise RuntimeError("deliberate render bug")


def test_candidates_that_cannot_be_rendered_end_at_render():
    backend = CountingBackend()
    op = BuggyRender()
    with LocalExecutor(backend) as ex:
        buggy = run(ex, Candidate(op.problem((64,), "fp32"), genome(), op))
        other = Candidate(OP.problem((64,), "fp32"), genome(), OP)
        other.problem = type(other.problem).make("gemm", ("M", "N", "K"), (8, 8, 8), "fp16")
        mismatched = run(ex, other)
    assert not backend.worker.calls
    assert buggy.status == "compile_error" and "render failed" in buggy.reason and "deliberate" in buggy.reason
    assert mismatched.status == "error" and "not 'faulty'" in mismatched.reason
    assert buggy.gpu == "standin-gpu"  # rows made on the CPU side name the GPU they were meant for


def test_compiled_fine_is_not_a_row():
    assert pipeline.compiled(fresh(), CompileResult("ok")) is None
    assert pipeline.compiled(fresh(), None) is None
