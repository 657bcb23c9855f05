"""The GPU test runner (tests/gpu/run_all.py) without a GPU: each file runs in its own pytest, its log and its line
in summary.json are kept as it finishes, files that no longer fit the budget are listed as not run, and the exit
status says whether everything ran and passed."""

from __future__ import annotations

import json

from tests.gpu import run_all


def test_outcome_reads_pytest_status_and_output():
    assert run_all.outcome(0, "== 3 passed in 1.0s ==") == "passed"
    assert run_all.outcome(0, "== 2 skipped in 0.1s ==") == "skipped"
    assert run_all.outcome(0, "== 1 passed, 1 skipped in 0.1s ==") == "passed"
    assert run_all.outcome(1, "== 1 failed, 2 passed ==") == "failed"
    assert run_all.outcome(None, "") == "timeout" and run_all.outcome(4, "usage") == "error"


def test_each_file_is_run_and_kept(tmp_path, capsys):
    good, bad = tmp_path / "test_good.py", tmp_path / "test_bad.py"
    good.write_text("def test_ok():\n    assert True\n")
    bad.write_text("def test_no():\n    assert 1 == 2\n")
    out = tmp_path / "out"
    assert run_all.main([str(good), str(bad), "--out", str(out), "--budget-s", "300"]) == 1
    rows = json.loads((out / "summary.json").read_text())
    assert [(r["file"], r["outcome"]) for r in rows] == [("test_good.py", "passed"), ("test_bad.py", "failed")]
    assert "1 passed" in rows[0]["summary"] and "assert 1 == 2" in (out / "test_bad.log").read_text()
    assert "test_bad.py" in capsys.readouterr().out.splitlines()[-1]  # the table comes last


def test_files_that_do_not_fit_are_listed_not_dropped(tmp_path):
    f = tmp_path / "test_x.py"
    f.write_text("def test_ok():\n    pass\n")
    assert run_all.main([str(f), "--out", str(tmp_path / "o"), "--budget-s", "5"]) == 1
    (row,) = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert row["outcome"] == "not run" and "out of time" in row["summary"]


def test_a_file_cut_by_the_budget_keeps_what_it_printed(tmp_path, monkeypatch):
    f = tmp_path / "test_slow.py"
    f.write_text("import time\n\ndef test_slow():\n    print('reached kernel 7', flush=True)\n    time.sleep(60)\n")
    monkeypatch.setattr(run_all, "_MIN_FILE_S", 0.0)
    assert run_all.main([str(f), "--out", str(tmp_path / "o"), "--budget-s", "8"]) == 1
    (row,) = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert row["outcome"] == "timeout" and "reached kernel 7" in (tmp_path / "o" / "test_slow.log").read_text()


def test_bad_arguments_are_one_line(tmp_path, capsys):
    assert run_all.main(["--budget-s", "0"]) == 2
    assert run_all.main([str(tmp_path / "nope.py")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "--budget-s" in err[0] and "no such test file" in err[1]
