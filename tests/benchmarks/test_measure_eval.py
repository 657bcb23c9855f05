"""The pieces of `python -m benchmarks.measure_eval` that run without a GPU (the script itself runs on the GPU)."""

from benchmarks.measure_eval import _table, make_candidates, throughput
from evo.evaluate import Backend, CompileResult, LocalExecutor
from evo.evaluate.worker import ChildWorker
from evo.problem import HOPPER
from evo.store.sqlite import Store
from tests.fixtures import worker_standins
from tests.fixtures.faulty_operator import FaultyOperator

OP = FaultyOperator()


class InstantCompile(Backend):
    """Compiles nothing: every candidate is 'ok' at once, except the ones asking for too much shared memory;
    the worker is a ChildWorker (the GPU worker's supervision) over stand-in children (test data, no GPU)."""

    needs_gpu = False

    def compile(self, cand, target):
        bad = cand.genome["fault"] == "smem"
        return CompileResult("out_of_resources" if bad else "ok", "too much shared memory" if bad else "",
                             resources={"shared": 0, "registers": 8})

    def open_worker(self, device_index):
        return ChildWorker(worker_standins.setup, worker_standins.handle, setup_args=("m",), seed=0)


def test_make_candidates_are_distinct():
    problem = OP.problem((4096,), "fp32")
    cands = make_candidates(OP, problem, HOPPER, 20, seed=1)
    assert len(cands) == 20 and len({c.source_hash for c in cands}) == 20
    assert make_candidates(OP, problem, HOPPER, 20, seed=1)[5].source_hash == cands[5].source_hash


def test_throughput_counts_and_stores_everything(tmp_path):
    problem = OP.problem((4096,), "fp32")
    cands = [c for c in make_candidates(OP, problem, HOPPER, 40, seed=2)
             if c.genome["fault"] in ("none", "wrong", "smem")][:8]
    with LocalExecutor(InstantCompile()) as executor, Store(tmp_path / "m.db") as store:
        result = throughput(cands, executor, store)
        assert store.count() == len(cands)
    assert sum(result["statuses"].values()) == len(cands)
    assert result["gpu_evaluated"] == sum(c.genome["fault"] != "smem" for c in cands)
    assert result["per_gpu_minute"] > 0 and 0 <= result["worker_busy_share"] <= 1.0001


def test_table_lines_up():
    text = _table([("a", "1", "", ""), ("long name", "22", "x", "yes")])
    assert text.splitlines()[1].index("22") == text.splitlines()[0].index("1")
