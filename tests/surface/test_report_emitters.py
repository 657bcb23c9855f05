"""The report's emitter view: shares and credited improvements replayed from the store match the search."""

from __future__ import annotations

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.search.loop import Search
from evo.store.sqlite import Store
from evo.surface.report_emitters import emitter_history
from tests.fixtures import search_fixtures as fx


def test_emitter_history_matches_the_scheduler(tmp_path, monkeypatch):
    import operators

    fx.register(monkeypatch)
    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), evaluations=40)
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend()) as ex:
        search = Search(exp, op, store, ex, run_id="t#1")
        summary = search.run()
        rows = store.evaluations()
    h = emitter_history(rows, exp.problems[0], op, exp.descriptors, exp.evaluation.noise_margin, points=7)
    assert h["evaluations"][-1] == 40 and len(h["evaluations"]) <= 8
    assert sum(v[-1] for v in h["share"].values()) == pytest.approx(1.0, abs=1e-3)
    for name, counts in summary.problems[0].emitters.items():  # what the bandit was credited, replayed
        assert h["credit"][name][-1] == counts["improvements"]
        assert h["share"][name][-1] == pytest.approx(counts["proposed"] / 40, abs=1e-3)
    assert h["credit"]["initial"][-1] >= 1


def test_report_shows_each_elites_share_of_the_floor(tmp_path, monkeypatch):
    import operators
    from evo.surface.report import ReportInput, report_data

    fx.register(monkeypatch)
    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), evaluations=12)
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend()) as ex:
        Search(exp, op, store, ex, run_id="t#1").run()
        key = exp.problems[0].key
        assert store.meta(f"floor:{key}", "unset") is None  # the stand-in measured no copy bandwidth
        p = report_data(ReportInput(store, "t", exp))["problems"][0]
        assert p["summary"]["sol_share"] is None and all(e["sol"] is None for e in p["elites"])
        store.set_meta(f"floor:{key}", {"ms": 0.5})  # TEST DATA: a made-up floor
        p = report_data(ReportInput(store, "t", exp))["problems"][0]
    assert all(e["sol"] == pytest.approx(0.5 / e["median_ms"], rel=1e-2) for e in p["elites"])
    assert p["summary"]["sol_share"] == pytest.approx(max(e["sol"] for e in p["elites"]), rel=1e-2)
    assert len(p["emitters"]["evaluations"]) >= 1
