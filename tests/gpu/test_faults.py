"""Fault injection on a real GPU: deliberately broken kernels of every kind go through the real compile pool,
supervisor and GPU worker; each must be classified right, the worker must be replaced exactly when its CUDA
context is lost or a kernel hangs, and no good result may be lost.

Run on the GPU machine:  python -m pytest tests/gpu/test_faults.py -q
"""

import pytest

from evo.evaluate.compile_pool import CompilePool
from evo.evaluate.evaluator import Evaluator
from evo.evaluate.worker import EvalSettings, GpuWorker
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


@pytest.fixture(scope="module")
def worker(cache_dir):
    with GpuWorker(0, settings=EvalSettings(reps=10, operators={"faulty": OP}), cache_dir=cache_dir) as w:
        yield w


def run_plan(plan, evaluator, worker, base_n):
    results = []
    for i, (fault, expected, replaced) in enumerate(plan):
        cand = candidate(fault, n=base_n + 64 * i, dtype="fp16")  # distinct: never served from the store
        pid = worker.info["pid"]
        ev = evaluator.evaluate(cand)
        results.append(ev)
        assert ev.status == expected, f"{fault}: {ev.status} {ev.reason}"
        assert (worker.info["pid"] != pid) == replaced, f"{fault}: replaced={not replaced}"
        assert ev.source_hash == cand.source_hash and ev.gpu == worker.gpu
        assert ev.status == "ok" or ev.reason, f"{fault}: a failure without a reason"
    for ev in results:
        if ev.status == "ok":  # every good candidate kept its result, with a baseline from the same process
            assert ev.max_rel_error < OP.tolerance(OP.problem((64,), "fp16"))
            assert ev.median_ms > 0 and ev.baseline_ms > 0 and ev.baseline == "torch" and len(ev.times_ms) >= 5
            assert ev.versions == worker.versions
    return results


def test_faults_with_compile_ahead(worker, cache_dir, tmp_path):
    target = worker.info["target"]
    with CompilePool(2, target=target, timeout_s=120, cache_dir=cache_dir, operators={"faulty": OP}) as pool, \
            Store(tmp_path / "faults.db") as store:
        evaluator = Evaluator(worker, store, compile=pool.compile, timeout_s=TIMEOUT_S)
        restarts = worker.restarts
        results = run_plan(AHEAD, evaluator, worker, base_n=1 << 16)
        assert worker.restarts == restarts + 2
        assert store.count() == len(AHEAD)  # every result stored as it came
        smem = results[3]
        assert smem.resources["shared"] > target.smem_bytes and "shared memory" in smem.reason
        for ev in results:
            if ev.status == "ok":  # the GPU loaded what the CPU compiled: no compile on the GPU side
                assert ev.resources["cache_hit"] is True, ev.resources


def test_faults_straight_to_the_gpu(worker, tmp_path):
    with Store(tmp_path / "direct.db") as store:
        evaluator = Evaluator(worker, store, timeout_s=TIMEOUT_S)
        restarts = worker.restarts
        results = run_plan(DIRECT, evaluator, worker, base_n=1 << 17)
        assert worker.restarts == restarts + 3
        assert store.count() == len(DIRECT)
        assert "out of resource" in results[3].reason.lower()
        assert "illegal" in results[5].reason.lower()
