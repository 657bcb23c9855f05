"""The CPU smoke evaluator: correctness in the interpreter at a tiny size, a fitness that is plainly a model
estimate (and says so in every row), and the same fault handling as on a GPU."""

import pytest

from evo.evaluate.smoke import SMOKE_GPU, SMOKE_NOTE, SmokeWorker, smoke_problem
from evo.problem import HOPPER
from evo.store.sqlite import Store
from tests.fixtures.faulty_operator import FaultyOperator, candidate, genome

OP = FaultyOperator()


@pytest.fixture(scope="module")
def smoke():
    with SmokeWorker(start_timeout_s=120) as w:
        yield w


def test_smoke_problem_is_tiny_and_interpretable():
    p = OP.problem((100_000,), "fp16")
    assert smoke_problem(OP, genome(), p, HOPPER).dims == {"N": 64}
    assert smoke_problem(OP, genome(), OP.problem((10,), "fp32"), HOPPER).dims == {"N": 10}


@pytest.mark.slow
def test_ok_rows_say_they_are_not_timings(smoke, tmp_path):
    cand = candidate("none", n=1 << 20)
    with Store(tmp_path / "smoke.db") as store:
        ev = smoke.evaluate(cand)
        store.add(ev)
        assert ev.status == "ok", ev.reason
        assert ev.gpu == SMOKE_GPU == "cpu-interpreter" and ev.reason == SMOKE_NOTE
        assert ev.baseline == "smoke-roofline" and ev.times_ms == [] and ev.versions["mode"] == "smoke"
        assert ev.median_ms == pytest.approx(OP.smoke_cost(cand.genome, cand.problem))
        assert 0 < ev.ratio < 1  # the model never claims to beat its own roofline
        assert ev.resources["smoke_problem"] == "faulty:64:fp32" and ev.max_rel_error < 1e-6
        assert store.lookup(cand.source_hash, cand.problem.key, SMOKE_GPU, ev.versions).id == ev.id
    other = candidate("none", n=1 << 20, block=512)
    assert OP.smoke_cost(other.genome, other.problem) != ev.median_ms  # genomes are told apart, deterministically


@pytest.mark.parametrize("fault,status", [("wrong", "wrong"), ("nan", "nan"), ("unwritten", "nan"),
                                          ("compile", "compile_error"), ("syntax", "compile_error"),
                                          ("raise", "error")])
@pytest.mark.slow
def test_faults_classified(smoke, fault, status):
    ev = smoke.evaluate(candidate(fault))
    assert ev.status == status, ev.reason
    assert ev.reason.startswith("smoke: ") and ev.median_ms is None


@pytest.mark.slow
def test_hanging_kernel_times_out_and_the_next_one_runs(smoke):
    hung = smoke.evaluate(candidate("hang"), timeout_s=6)
    assert hung.status == "timeout" and smoke.restarts >= 1
    dead = smoke.evaluate(candidate("launcher_exit"))
    assert dead.status == "crashed"
    assert smoke.evaluate(candidate("none", n=512)).status == "ok"
