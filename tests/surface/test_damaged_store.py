"""A run directory whose store was edited by hand: `evo status`, `export` and `report` skip the rows that do not
decode with one warning line (their id and count), and `evo run --resume` refuses the store before any worker
starts, saying what to do. Never a traceback: not for text a flipped byte left undecodable (its row is skipped),
not for a damaged page or schema (the store is refused in one line), not for a gene outside its domain (its row
is skipped), not for a run directory that cannot be written (--resume refuses in one line)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


# -- damage below the rows: bytes flipped in the file itself ---------------------------------------------------

COMMANDS = [["status"], ["export", "--shape", "64x64x64"], ["export", "--all"], ["report"]]


def _argv(argv, run, tmp_path):
    return [argv[0], str(run), *argv[1:], *(["-o", str(tmp_path / "out")] if argv[0] != "status" else [])]


def _flip(store, at: int, value: int) -> None:
    data = bytearray(store.read_bytes())
    data[at] = value
    store.write_bytes(bytes(data))


def _page_size_and_root(store) -> tuple[int, int]:
    db = sqlite3.connect(store)
    size = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name='evaluations'").fetchone()[0]
    db.close()
    return size, root


@pytest.fixture
def run(tmp_path):
    run = make_run(tmp_path / "runs", fast_elite=FAST)
    db = sqlite3.connect(run / "store.sqlite")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every row in the file itself, where the bytes are flipped
    db.close()
    return run


@pytest.mark.parametrize("argv", COMMANDS)
def test_text_that_is_not_utf8_skips_its_row(run, tmp_path, capsys, argv):
    store = run / "store.sqlite"
    db = sqlite3.connect(store)
    (row_id, digest), = db.execute("SELECT id, genome_hash FROM evaluations WHERE status='ok' ORDER BY median_ms "
                                   "LIMIT 1").fetchall()
    db.close()
    at = store.read_bytes().index(digest.encode())
    _flip(store, at + 3, 0xFF)  # never UTF-8
    assert main(_argv(argv, run, tmp_path)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if "damaged" in line]
    assert len(warnings) == 1 and f"(id {row_id}: genome_hash is not UTF-8 text)" in warnings[0]


@pytest.mark.parametrize("argv", COMMANDS)
@pytest.mark.parametrize("where", ["table page", "schema"])
def test_a_damaged_page_or_schema_is_refused_in_one_line(run, tmp_path, capsys, argv, where):
    store = run / "store.sqlite"
    if where == "table page":  # the table's root page gets a page type SQLite does not know
        size, root = _page_size_and_root(store)
        _flip(store, (root - 1) * size + (100 if root == 1 else 0), 0x07)
    else:  # a column name in the schema stops being UTF-8
        _flip(store, store.read_bytes().index(b"versions TEXT") + 6, 0xEE)
    assert main(_argv(argv, run, tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert str(store) in err and ("damaged" in err)
    assert not (tmp_path / "out").exists()


def test_api_load_of_a_damaged_store_is_a_load_error(run):
    from evo.api import LoadError, load

    size, root = _page_size_and_root(run / "store.sqlite")
    _flip(run / "store.sqlite", (root - 1) * size + (100 if root == 1 else 0), 0x07)
    with pytest.raises(LoadError, match="is damaged") as info:
        load(run, shape="64x64x64")
    assert "\n" not in str(info.value)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(0, 7)), min_size=1, max_size=24),
       command=st.sampled_from(COMMANDS))
def test_flipped_bits_anywhere_never_trace_back(run, tmp_path_factory, flips, command):
    """Whatever bits flip in the file: the command works (warning of the rows it skipped) or refuses in one line."""
    import shutil

    copy = tmp_path_factory.mktemp("flipped") / "run"
    shutil.copytree(run, copy)
    store = copy / "store.sqlite"
    data = bytearray(store.read_bytes())
    for where, bit in flips:
        data[100 + int(where * (len(data) - 100))] ^= 1 << bit  # past the file header: SQLite refuses that whole
    store.write_bytes(bytes(data))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main(_argv(command, copy, copy))  # an exception here is the traceback a user would see
    lines = err.getvalue().strip().splitlines()
    assert (status == 0 and len(lines) <= 1) or (status == 2 and len(lines) == 1), err.getvalue()


# -- a gene outside its domain: the row cannot be rendered again, so it is never an elite ---------------------

@pytest.mark.parametrize("argv", COMMANDS)
def test_a_stored_gene_outside_its_domain_is_a_skipped_row(run, tmp_path, capsys, argv):
    db = sqlite3.connect(run / "store.sqlite")
    with db:
        (row_id, genome), = db.execute("SELECT id, genome FROM evaluations WHERE status='ok' ORDER BY median_ms "
                                       "LIMIT 1").fetchall()
        bad = json.loads(genome)
        bad["genes"]["BLOCK_M"] = 33  # not a power of two: no GEMM tile
        db.execute("UPDATE evaluations SET genome=? WHERE id=?", (json.dumps(bad), row_id))
    db.close()
    assert main(_argv(argv, run, tmp_path)) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    warnings = [line for line in err.splitlines() if "damaged" in line]
    assert len(warnings) == 1 and f"(id {row_id}: genome outside its family's domain" in warnings[0]
    if argv[0] == "export":
        assert "BLOCK_M=33" not in (tmp_path / "out").read_text()


# -- a run directory the user cannot write ----------------------------------------------------------------------

def test_resume_of_a_run_that_cannot_be_written_is_one_line(run, capsys, monkeypatch):
    from evo.store import resumable

    if os.geteuid() == 0:  # root writes anywhere: stand in for a run directory it may not write
        real = os.access
        monkeypatch.setattr(resumable.os, "access", lambda p, mode: False if Path(p) == run else real(p, mode))
    else:
        run.chmod(0o555)
    try:
        assert main(["run", str(run / "experiment.yaml"), "--out", str(run), "--resume"]) == 2
    finally:
        run.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not writable" in err and "Traceback" not in err


def test_resume_when_sqlite_finds_the_store_read_only_is_one_line(run, capsys, monkeypatch):
    from evo.store import resumable

    def read_only(path, wait_s=0):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(resumable, "try_write_lock", read_only)
    assert main(["run", str(run / "experiment.yaml"), "--out", str(run), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "readonly database" in err and "Traceback" not in err
