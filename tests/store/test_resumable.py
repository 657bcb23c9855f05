"""A resume reads the store before writing to it: an empty, foreign, damaged or locked store is refused in one line
that says what to do, and is left exactly as it was; the lock is waited on for seconds, not SQLite's 30."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from evo.problem import Problem
from evo.store.record import Evaluation
from evo.store.resumable import check_resumable
from evo.store.sqlite import Store, StoreError
from evo.store.store_lock import holders

PROBLEM = Problem("faulty", (("N", 64),), "fp32")
HOLDER = textwrap.dedent("""
    import sqlite3, sys, time
    db = sqlite3.connect(sys.argv[1], isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    print("holding", flush=True)
    time.sleep(60)
""")


def make_store(path, n=2):
    with Store(path) as store:
        for i in range(n):
            store.add(Evaluation(operator="faulty", problem_key=PROBLEM.key, problem=PROBLEM.to_json(), genome="{}",
                                 genome_hash=f"g{i}", source_hash=f"s{i}", status="ok", median_ms=1.0 + i))
        store.set_meta("seed", 0)
    return path


def refusal(path) -> str:
    with pytest.raises(StoreError) as info:
        check_resumable(path, StoreError)
    text = str(info.value)
    assert "\n" not in text and text.startswith("cannot resume")
    return text


def test_an_intact_store_may_be_resumed(tmp_path):
    check_resumable(make_store(tmp_path / "s.sqlite"), StoreError)


def test_a_zero_byte_store_is_refused_and_left_empty(tmp_path):
    path = tmp_path / "s.sqlite"
    path.touch()
    assert "is empty (0 bytes)" in refusal(path)
    assert path.stat().st_size == 0


@pytest.mark.parametrize("content", [b"not a database at all" * 100, None])
def test_a_foreign_file_is_refused_and_not_turned_into_a_store(tmp_path, content):
    path = tmp_path / "s.sqlite"
    if content is None:  # SQLite, but another program's database
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE photos (id INTEGER)")
        db.close()
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    assert "is not an evo store" in refusal(path)
    assert path.read_bytes() == before


def test_a_damaged_row_is_refused_by_id(tmp_path):
    path = make_store(tmp_path / "s.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE evaluations SET genome='{}', problem='[1,2]' WHERE id=2")
    db.close()
    text = refusal(path)
    assert "has 1 damaged row (id 2: problem does not decode)" in text and "--out DIR" in text


def test_damaged_metadata_is_refused(tmp_path):
    path = make_store(tmp_path / "s.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='{oops' WHERE key='seed'")
    db.close()
    assert "key 'seed' is not JSON" in refusal(path)


def test_a_store_locked_by_another_program_is_refused_in_seconds_naming_it(tmp_path):
    path = make_store(tmp_path / "s.sqlite")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert f"pid {holder.pid} " in " ".join(holders(path)) + " "
        t0 = time.monotonic()
        text = refusal(path)
        assert time.monotonic() - t0 < 10
        assert f"is locked by pid {holder.pid} (python" in text and "then resume again" in text
    finally:
        holder.kill()
        holder.wait()
    check_resumable(path, StoreError)  # the holder gone, the same store resumes
