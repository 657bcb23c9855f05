"""Budgets that serve small problems (issue 40): a problem's wall time counts from its first measured candidate,
and the floor in evaluations (budget.min_evaluations) keeps wall time and stagnation from ending it before,
unless its space is exhausted. Fitness comes from the test stand-in backend."""

from __future__ import annotations

import time

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.experiment.rundir import RunDir
from evo.experiment.spec import Budget
from evo.search.budget import ProblemClock, cut_short, stop_reason
from evo.search.run import run_experiment
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


@pytest.fixture(autouse=True)
def _operator(monkeypatch):
    fx.register(monkeypatch)


class _SlowFirst(fx.StandInBackend):
    """The first evaluation waits `first_s`, as a GPU worker that is still starting would."""

    def __init__(self, first_s: float) -> None:
        super().__init__()
        self.first_s, self.calls = first_s, 0

    def open_worker(self, device_index: int):
        worker, backend = fx.StandInWorker(0.0), self
        evaluate = worker.evaluate

        def slow(cand, timeout_s):
            backend.calls += 1
            if backend.calls == 1:
                time.sleep(backend.first_s)
            return evaluate(cand, timeout_s)

        worker.evaluate = slow
        return worker


def test_the_clock_starts_at_the_first_measured_candidate(tmp_path):
    # the first evaluation takes longer than the whole budget: counted from the problem's start, it would be the
    # only one (issue 40: the first problem of each zoo experiment got 0-2 evaluations)
    exp = fx.experiment(name="slow", sizes=(512,), budget=Budget(evaluations=None, wall_s=0.6, min_evaluations=0))
    s = run_experiment(exp, tmp_path / "slow", executor=LocalExecutor(_SlowFirst(first_s=1.0)))
    (p,) = s.problems
    assert p.reason == "wall_s" and p.evaluations > 2
    with Store(RunDir(tmp_path / "slow").store) as store:
        assert 0.6 <= store.meta(f"wall_s:{exp.problems[0].key}") < 1.0 + 0.6  # the slow start is not in it


def test_the_floor_holds_wall_time_and_stagnation_back(tmp_path):
    exp = fx.experiment(name="floor", sizes=(512,), budget=Budget(evaluations=None, stagnation=1, min_evaluations=10))
    s = run_experiment(exp, tmp_path / "floor", executor=LocalExecutor(fx.StandInBackend()))
    assert s.problems[0].reason == "stagnation" and s.problems[0].evaluations >= 10
    # the evaluations limit is a limit: the default floor (24) never exceeds it
    exp = fx.experiment(name="few", sizes=(512,), budget=Budget(evaluations=5, wall_s=0.0))
    s = run_experiment(exp, tmp_path / "few", executor=LocalExecutor(fx.StandInBackend()))
    assert s.problems[0].reason == "evaluations" and s.problems[0].evaluations == 5


def test_an_exhausted_space_ends_before_the_floor(tmp_path):
    # N = 16: BLOCK 16, ITEMS 1, one warp; only the masked tail varies: two genomes in the whole space
    exp = fx.experiment(name="tiny", sizes=(16,), budget=Budget(evaluations=None, wall_s=0.0, min_evaluations=24))
    s = run_experiment(exp, tmp_path / "tiny", executor=LocalExecutor(fx.StandInBackend()))
    (p,) = s.problems
    assert p.exhausted and p.reason == "wall_s" and p.evaluations < 24
    with Store(RunDir(tmp_path / "tiny").store) as store:
        summary = store.meta(f"summary:{exp.problems[0].key}")
        assert summary["exhausted"] is True
        assert cut_short(summary, p.evaluations, 24) == ""


def test_stop_reasons_and_cut_short_words():
    b = Budget(evaluations=100, wall_s=1.0, stagnation=5, sol=0.8, min_evaluations=24)
    assert stop_reason(b, 3, 0, 2.0, None, False) == (None, True)  # wall time reached, floor holds it back
    assert stop_reason(b, 3, 0, 2.0, None, True) == ("wall_s", False)  # exhausted: nothing to hold back for
    assert stop_reason(b, 24, 20, 2.0, None, False) == ("wall_s", False)
    assert stop_reason(b, 30, 20, 0.5, None, False) == ("stagnation", False)
    assert stop_reason(b, 3, 0, 2.0, 0.9, False) == ("sol", False)  # a goal reached is reached
    assert stop_reason(b, 100, 0, 0.0, None, False) == ("evaluations", False)
    assert stop_reason(b, 3, 0, 0.5, None, False) == (None, False)
    assert Budget(evaluations=10).floor == 10 and Budget(evaluations=None).floor == 24
    assert cut_short({"reason": "wall_s"}, 3, 24) == "cut short: 3 of its 24-evaluation floor (stopped by wall_s)"
    assert "interrupted" in cut_short(None, 3, 24)
    assert cut_short({"reason": "wall_s"}, 24, 24) == "" and cut_short({"reason": "sol"}, 3, 24) == ""


def test_clock_counts_only_after_a_measured_row():
    now = [100.0]
    clock = ProblemClock(5.0, now=lambda: now[0])

    class Row:
        def __init__(self, gpu):
            self.gpu = gpu

    now[0] = 130.0
    clock.note(Row(""), 1, 24)  # refused before a GPU (compile error): no start
    assert clock.elapsed() == 5.0
    clock.note(Row("NVIDIA H100"), 2, 24)
    now[0] = 131.5
    assert clock.elapsed() == pytest.approx(6.5)
    late = ProblemClock(0.0, now=lambda: now[0])
    late.note(Row(""), 24, 24)  # every candidate failed before a GPU: the floor's worth starts it
    assert late.started == now[0]


class _CountingExecutor(LocalExecutor):
    starts = 0

    def start(self):
        type(self).starts += 1
        super().start()


def test_several_experiments_share_one_executor_and_keep_their_own_stores(tmp_path):
    from evo.search.run import StartupError, run_experiments

    a = fx.experiment(name="a", sizes=(512,), evaluations=6)
    b = fx.experiment(name="b", sizes=(256,), evaluations=5)
    ex = _CountingExecutor(fx.StandInBackend())
    began = []
    summaries = run_experiments([(a, tmp_path / "a", False), (b, tmp_path / "b", False)], on_run=began.append,
                                executor=ex)
    assert _CountingExecutor.starts == 1 and [e.name for e in began] == ["a", "b"]
    assert [s.problems[0].evaluations for s in summaries] == [6, 5]
    for name, n in (("a", 6), ("b", 5)):
        with Store(RunDir(tmp_path / name).store) as store:
            assert store.count() == n and {r.run_id for r in store.iter()} == {f"{name}#1"}
    ex.shutdown()
    # the second run serves what its own store measured, not the first one's
    c = fx.experiment(name="b", sizes=(256,), evaluations=7)
    summaries = run_experiments([(c, tmp_path / "b", True)], executor=_CountingExecutor(fx.StandInBackend()))
    assert summaries[0].problems[0].evaluations == 7
    other = fx.experiment(name="c", sizes=(256,), evaluations=5, seed=3)
    with pytest.raises(StartupError, match="seed differs"):
        run_experiments([(a, tmp_path / "x", False), (other, tmp_path / "y", False)])
