"""`python -m benchmarks.scaling` without a GPU: bad arguments, a bad experiment or model, too few GPUs and a folder
that is not a kept session are each one line and exit status 2, before any run; the old entry point still runs it."""

from __future__ import annotations

import pytest

from benchmarks.scaling import cli
from benchmarks.scaling.runner import ROOT

EXPERIMENTS = ROOT / "experiments"


@pytest.mark.parametrize("argv, words", [
    (["--minutes", "0"], "--minutes"), (["--gpus", "1", "1"], "--gpus"), (["--gpus", "2"], "at least two"),
    (["--evaluations", "0"], "--evaluations"), (["--zoo-wall-s", "0"], "--zoo-wall-s"),
    (["--deadline-s", "-1"], "--deadline-s"), (["--context", "-1"], "--context"),
    (["--analyse", "/nonexistent-folder"], "no such folder"),
    (["--problems", "0"], "--problems 0"), (["--problems", "2", "2"], "distinct"),
    (["--experiment", str(EXPERIMENTS / "smoke.yaml")], "smoke"), (["--experiment", "/nonexistent.yaml"], "no such"),
    (["--zoo", "/nonexistent.json"], "no such file"), (["--zoo", "m.json", "--problems", "1"], "searched whole"),
    (["--keep", str(EXPERIMENTS)], "already holds files"),
])
def test_bad_arguments_are_one_line(argv, words, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and err.startswith("scaling: ")


def test_without_enough_gpus_it_stops_before_any_run(capsys, monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cli.main(["--out", str(tmp_path), "--keep", str(tmp_path / "kept")]) == 2
    assert "needs 2 CUDA GPUs and 0 are visible" in capsys.readouterr().err
    assert cli.main(["--gpus", "1", "4", "--out", str(tmp_path)]) == 2
    assert "needs 4 CUDA GPUs and 0 are visible" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_is_not_a_kept_session_is_one_line(tmp_path, capsys):
    assert cli.main(["--analyse", str(tmp_path)]) == 2
    assert "no session.json here" in capsys.readouterr().err
    (tmp_path / "session.json").write_text("[1, 2]")
    assert cli.main(["--analyse", str(tmp_path)]) == 2
    assert "not a scaling session" in capsys.readouterr().err


def test_the_old_entry_point_runs_the_package():
    from tests.gpu import scaling

    assert scaling.main is cli.main
