"""A run directory whose store was edited by hand: `evo status`, `export` and `report` skip the rows that do not
decode with one warning line (their id and count), and `evo run --resume` refuses the store before any worker
starts, saying what to do. Never a traceback."""

from __future__ import annotations

import sqlite3

import pytest

from evo.surface.cli import main
from tests.fixtures.run_fixture import make_run

FAST = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 2, "GROUP_M": 1}


def _damage_the_elite(run) -> int:
    """The issue's edit, on the fastest correct row (the elite every command reads first); returns its id."""
    db = sqlite3.connect(run / "store.sqlite")
    with db:
        (row_id,) = db.execute("SELECT id FROM evaluations WHERE status='ok' ORDER BY median_ms LIMIT 1").fetchone()
        db.execute("UPDATE evaluations SET genome='{}', problem='[1,2]' WHERE id=?", (row_id,))
    db.close()
    return row_id


@pytest.fixture
def damaged(tmp_path):
    run = make_run(tmp_path / "runs", fast_elite=FAST)
    return run, _damage_the_elite(run)


@pytest.mark.parametrize("argv", [["status"], ["export", "--shape", "64x64x64"], ["export", "--all"], ["report"]])
def test_readers_skip_the_damaged_row_in_one_line(damaged, tmp_path, capsys, argv):
    run, row_id = damaged
    out = ["-o", str(tmp_path / "out")] if argv[0] != "status" else []
    assert main([argv[0], str(run), *argv[1:], *out]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if "damaged" in line]
    assert len(warnings) == 1 and f"1 damaged row (id {row_id}: problem does not decode)" in warnings[0]
    assert "Traceback" not in err


def test_every_row_damaged_is_a_one_line_refusal_or_an_empty_summary(tmp_path, capsys):
    run = make_run(tmp_path / "runs")
    with sqlite3.connect(run / "store.sqlite") as db:
        db.execute("UPDATE evaluations SET problem='[1,2]'")
    db.close()
    assert main(["export", str(run), "--shape", "64x64x64", "-o", str(tmp_path / "k.py")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2
    assert main(["status", str(run)]) == 0
    assert "damaged rows (id 1: " in capsys.readouterr().err
