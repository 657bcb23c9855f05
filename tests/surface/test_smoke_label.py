"""A smoke run's score is one figure everywhere (issue 41: status and report said 53.02 where the export header
said 9.888e-06 for one elite): progress, status, the report, evo export's line and the exported headers all show
the archive's objective, labelled as the stand-in it is."""

from __future__ import annotations

import operators
from evo.store.sqlite import Store
from evo.surface.cli import main
from evo.surface.export import export_all, export_one
from evo.surface.smoke_label import SMOKE_SCORE, smoke_score, smoke_value
from evo.surface.status import format_status, run_status
from tests.fixtures.run_fixture import make_run


def test_one_smoke_figure_in_status_export_and_the_export_line(tmp_path, capsys):
    run = make_run(tmp_path, smoke=True, shapes=("64x64x64",), dtype="fp16")
    with Store(run / "store.sqlite", readonly=True) as store:
        (row,) = run_status(store)
        text, elite = export_one(store, (64, 64, 64))
        every, _ = export_all(store)
    shown = smoke_score(row.best)
    op = operators.get("gemm")
    assert smoke_value(op, elite.problem, elite.evaluation) == row.best  # the archive's objective itself
    assert shown in format_status([row], smoke=True)
    assert f"# Smoke score (the CPU smoke evaluator's, as evo status and evo report show it): {shown}." in text
    assert f"smoke score {shown}" in every
    assert "Smoke fitness" not in text  # the stand-in cost it showed before, a number nothing else showed
    assert main(["export", str(run), "--shape", "64x64x64", "-o", str(tmp_path / "k.py")]) == 0
    captured = capsys.readouterr()
    assert f"smoke score {shown}" in captured.out + captured.err and SMOKE_SCORE in shown
