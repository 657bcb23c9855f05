"""Speed-of-light stopping: a problem stops once its elite reaches `budget.sol` of the floor; without a floor
(a smoke run, or this test's worker without a measured copy bandwidth) it says so and never stops for it."""

from __future__ import annotations

import dataclasses

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.evaluate.roofline import floor
from evo.experiment.spec import Budget
from evo.search.loop import Search
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx

FLOOR_MS = 0.9  # the test's made-up floor: the stand-in's best kernel (1.0 ms) reaches 90% of it


class FloorWorker(fx.StandInWorker):
    """The stand-in worker, reporting a made-up copy bandwidth (TEST DATA, not a measurement)."""

    def __init__(self, copy_GBps: float) -> None:
        super().__init__(0.0)
        self._info = dataclasses.replace(self._info, copy_GBps=copy_GBps)


class FloorBackend(fx.StandInBackend):
    def __init__(self, copy_GBps: float | None) -> None:
        super().__init__()
        self.copy_GBps = copy_GBps

    def open_worker(self, device_index: int):
        return FloorWorker(self.copy_GBps) if self.copy_GBps else fx.StandInWorker(0.0)


@pytest.fixture(autouse=True)
def _operator(monkeypatch):
    fx.register(monkeypatch)


def _run(tmp_path, copy_GBps, sol):
    import operators

    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), budget=Budget(evaluations=120, sol=sol), seed=2)
    events = []
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(FloorBackend(copy_GBps)) as ex:
        summary = Search(exp, op, store, ex, events.append, run_id="t#1").run()
        rows = store.evaluations()
        meta = store.all_meta()
    return op, exp.problems[0], summary.problems[0], rows, events, meta


def test_sol_stops_a_problem_at_the_share_of_the_floor(tmp_path):
    import operators

    op = operators.get(fx.OPERATOR)
    problem = op.problem((512,), "fp32")
    copy = op.bytes(problem) / (FLOOR_MS * 1e-3) / 1e9
    f = floor(op, problem, fx.STAND_IN_GPU, copy)
    assert f is not None and f.ms == pytest.approx(FLOOR_MS) and f.compute_ms is None  # no peak for this "GPU"
    _, _, summary, rows, events, meta = _run(tmp_path, copy, sol=0.85)
    assert summary.reason == "sol" and summary.evaluations < 120
    best_ms = min(r.median_ms for r in rows if r.status == "ok")
    assert FLOOR_MS / best_ms >= 0.85 and summary.sol_share == pytest.approx(FLOOR_MS / best_ms)
    assert [r.median_ms for r in rows].index(best_ms) == len(rows) - 1  # stopped as soon as it got there
    assert meta[f"floor:{problem.key}"]["ms"] == pytest.approx(FLOOR_MS)
    shares = [e.sol_share for e in events if e.kind == "evaluation" and e.sol_share is not None]
    assert shares and shares == sorted(shares) and shares[-1] >= 0.85


def test_no_floor_no_sol_stop_and_says_so(tmp_path):
    _, problem, summary, rows, events, meta = _run(tmp_path, None, sol=0.5)
    assert summary.reason == "evaluations" and len(rows) == 120 and summary.sol_share is None
    assert meta[f"floor:{problem.key}"] is None
    (msg,) = [e.message for e in events if e.kind == "message"]
    assert "no speed-of-light floor" in msg
