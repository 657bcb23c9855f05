"""`evo run --resume` on a store it must not continue (empty, damaged, held by another program): one line on
stderr, exit 2, before any worker starts, within seconds, and the store left as it was."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time

from evo.surface.cli import main
from tests.fixtures.run_fixture import make_run
from tests.store.test_resumable import HOLDER


def _resume(run, capsys) -> tuple[int, str]:
    code = main(["run", str(run / "experiment.yaml"), "--out", str(run), "--resume"])
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "starting" not in out.err
    return code, out.err.strip()


def test_resume_of_a_zero_byte_store_is_refused(tmp_path, capsys):
    run = make_run(tmp_path / "runs", smoke=True)
    (run / "store.sqlite").write_bytes(b"")
    code, err = _resume(run, capsys)
    assert code == 2 and len(err.splitlines()) == 1
    assert "is empty (0 bytes)" in err and "--out DIR" in err
    assert (run / "store.sqlite").stat().st_size == 0  # not silently made into a fresh run


def test_resume_of_a_damaged_store_is_refused(tmp_path, capsys):
    run = make_run(tmp_path / "runs", smoke=True)
    with sqlite3.connect(run / "store.sqlite") as db:
        db.execute("UPDATE evaluations SET genome='{}', problem='[1,2]' WHERE id=3")
    db.close()
    code, err = _resume(run, capsys)
    assert code == 2 and len(err.splitlines()) == 1 and "1 damaged row (id 3: " in err


def test_resume_of_a_locked_store_names_the_holder_within_seconds(tmp_path, capsys):
    run = make_run(tmp_path / "runs", smoke=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run / "store.sqlite")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        t0 = time.monotonic()
        code, err = _resume(run, capsys)
        assert time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"locked by pid {holder.pid} (python" in err
