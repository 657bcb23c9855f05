"""`evo status` and `evo report` say when a problem's budget was cut short: it ended before its floor in
evaluations (budget.min_evaluations) otherwise than by an exhausted space or a reached goal. Rows are TEST DATA."""

from __future__ import annotations

from evo.experiment.config import load_experiment
from evo.experiment.rundir import RunDir
from evo.store.sqlite import Store
from evo.surface.cli import main
from evo.surface.report import ReportInput, report_data
from evo.surface.status import run_status
from tests.fixtures.run_fixture import make_run


def test_status_and_report_name_a_cut_short_budget(tmp_path, capsys):
    run = make_run(tmp_path, shapes=("64x64x64", "32x64x64"), n_random=3)  # fewer rows than the default floor
    experiment = load_experiment(RunDir(run).experiment)
    with Store(RunDir(run).store) as store:
        first, second = store.problem_keys()
        store.set_meta(f"summary:{first}", {"reason": "wall_s"})
        store.set_meta(f"summary:{second}", {"reason": "sol"})  # a goal reached is not cut short
        rows = {r.key: r for r in run_status(store, experiment)}
        assert rows[first].cut_short.startswith("cut short:") and "stopped by wall_s" in rows[first].cut_short
        assert rows[second].cut_short == ""
        data = report_data(ReportInput(store, "fixture", experiment))
        by_key = {p["key"]: p["summary"]["cut_short"] for p in data["problems"]}
        assert by_key[first] == rows[first].cut_short and by_key[second] == ""
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"{first}: cut short: " in out and f"{second}: cut short" not in out
    assert main(["report", str(run)]) == 0
    assert "Budget cut short" in (run / "report.html").read_text()
