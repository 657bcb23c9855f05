"""Fault injection on a real GPU: deliberately broken kernels of every kind go through the search's pipeline
(the local executor: its compile child, then the supervised GPU worker); each must be classified right, the
worker must be replaced exactly when its CUDA context is lost or a kernel hangs, and no good result may be lost.

Run on the GPU machine:  python -m pytest tests/gpu/test_faults.py -q
"""

import pytest

from evo.evaluate import Backend, GpuBackend, LocalExecutor, Worker
from evo.evaluate.worker import GpuWorker
from evo.experiment.spec import EvaluationSpec
from evo.store.sqlite import Store
from tests.fixtures.faulty_operator import FaultyOperator, candidate

pytestmark = pytest.mark.gpu

OP = FaultyOperator()
TIMEOUT_S = 30.0

# (fault, status with compile-ahead, worker replaced) -- compile-ahead stops compile faults on the CPU
AHEAD = [
    ("none", "ok", False), ("syntax", "compile_error", False), ("compile", "compile_error", False),
    ("smem", "out_of_resources", False), ("none", "ok", False), ("oob", "crashed", True), ("none", "ok", False),
    ("hang", "timeout", True), ("none", "ok", False), ("wrong", "wrong", False), ("nan", "nan", False),
    ("unwritten", "nan", False), ("raise", "compile_error", False), ("launcher_exit", "compile_error", False),
    ("none", "ok", False),
]
# straight to the GPU (no compile-ahead): the worker meets every fault itself
DIRECT = [
    ("none", "ok", False), ("syntax", "compile_error", False), ("compile", "compile_error", False),
    ("smem", "out_of_resources", False), ("none", "ok", False), ("oob", "crashed", True),
    ("raise", "error", False), ("launcher_exit", "crashed", True), ("hang", "timeout", True),
    ("none", "ok", False),
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("triton-cache"))


class Borrowed(Worker):
    """The module's GPU worker, lent to one executor (which must not close it: restarts are counted across)."""

    def __init__(self, worker):
        self.worker = worker

    @property
    def info(self):
        return self.worker.info

    def evaluate(self, cand, timeout_s):
        return self.worker.evaluate(cand, timeout_s)


class Ahead(GpuBackend):
    """The real backend (compile ahead in a child sharing the worker's Triton cache) over the module's worker."""

    def __init__(self, worker, cache_dir):
        super().__init__(EvaluationSpec(timeout_s=TIMEOUT_S), cache_dir=cache_dir)
        self.worker = worker

    def open_worker(self, device_index):
        return Borrowed(self.worker)

    def __getstate__(self):
        # the compile child gets this backend without the module's worker (a live process handle it never uses)
        return {k: v for k, v in self.__dict__.items() if k != "worker"}


class Direct(Backend):
    """Nothing compiled ahead: the worker meets every fault itself."""

    def __init__(self, worker):
        self.worker = worker

    def open_worker(self, device_index):
        return Borrowed(self.worker)


@pytest.fixture(scope="module")
def worker(cache_dir):
    with GpuWorker(0, settings=EvaluationSpec(reps=10), cache_dir=cache_dir) as w:
        yield w


def run_plan(plan, executor, store, worker, base_n):
    results = []
    for i, (fault, expected, replaced) in enumerate(plan):
        cand = candidate(fault, n=base_n + 64 * i, dtype="fp16")  # distinct: never served from the store
        pid = worker.info.name
        executor.submit(cand)
        ((_, ev),) = executor.poll()
        store.add(ev)  # as the search does
        results.append(ev)
        assert ev.status == expected, f"{fault}: {ev.status} {ev.reason}"
        assert (worker.info.name != pid) == replaced, f"{fault}: replaced={not replaced}"
        assert ev.source_hash == cand.source_hash and ev.gpu == worker.info.gpu
        assert ev.status == "ok" or ev.reason, f"{fault}: a failure without a reason"
    for ev in results:
        if ev.status == "ok":  # every good candidate kept its result, with a baseline from the same process
            assert ev.max_rel_error < OP.tolerance(OP.problem((64,), "fp16"))
            assert ev.median_ms > 0 and ev.baseline_ms > 0 and ev.baseline == "torch" and len(ev.times_ms) >= 5
            assert ev.versions == worker.info.versions
    return results


def test_faults_with_compile_ahead(worker, cache_dir, tmp_path):
    target = worker.info.target
    with LocalExecutor(Ahead(worker, cache_dir), EvaluationSpec(timeout_s=TIMEOUT_S), lookup=None) as executor, \
            Store(tmp_path / "faults.db") as store:
        restarts = worker.restarts
        results = run_plan(AHEAD, executor, store, worker, base_n=1 << 16)
        assert worker.restarts == restarts + 2
        assert store.count() == len(AHEAD)  # every result stored as it came
        smem = results[3]
        assert smem.resources["shared"] > target.smem_bytes and "shared memory" in smem.reason
        for ev in results:
            if ev.status == "ok":  # the GPU loaded what the CPU compiled: no compile on the GPU side
                assert ev.resources["cache_hit"] is True, ev.resources


def test_faults_straight_to_the_gpu(worker, tmp_path):
    with LocalExecutor(Direct(worker), EvaluationSpec(timeout_s=TIMEOUT_S)) as executor, \
            Store(tmp_path / "direct.db") as store:
        restarts = worker.restarts
        results = run_plan(DIRECT, executor, store, worker, base_n=1 << 17)
        assert worker.restarts == restarts + 3
        assert store.count() == len(DIRECT)
        assert "out of resource" in results[3].reason.lower()
        assert "illegal" in results[5].reason.lower()
