"""Every stored row is untrusted: whatever a column holds, reading it either gives an Evaluation or a BadRow, and a
store skips (and counts) what does not decode instead of failing the reader."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evo.problem import Problem
from evo.store.record import Evaluation
from evo.store.row_check import BadRow, decode_row
from evo.store.sqlite import Store

PROBLEM = Problem("faulty", (("N", 64),), "fp32")


def good(**kw) -> Evaluation:
    fields = dict(operator="faulty", problem_key=PROBLEM.key, problem=PROBLEM.to_json(),
                  genome='{"family": "f", "genes": {"B": 4}}', genome_hash="g", source_hash="s", status="ok",
                  median_ms=1.0, times_ms=[1.0, 1.1])
    fields.update(kw)
    return Evaluation(**fields)


def stored(tmp_path, n=3):
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        ids = [store.add(good(source_hash=f"s{i}", median_ms=1.0 + i)) for i in range(n)]
    return path, ids


def test_an_intact_row_decodes_to_what_was_stored(tmp_path):
    path, _ = stored(tmp_path, 1)
    with Store(path, readonly=True) as store:
        (ev,) = store.evaluations()
    assert (ev.problem, ev.times_ms, ev.median_ms) == (PROBLEM.to_json(), [1.0, 1.1], 1.0)
    assert not store.skipped


@pytest.mark.parametrize("sql, why", [
    ("genome='{}', problem='[1,2]'", "problem does not decode"),  # the example
    ("problem='{\"operator\": \"faulty\", \"shape\": [[\"N\", 8]], \"dtype\": \"fp32\"}'", "does not match"),
    ("genome='not json'", "genome is not valid JSON"),
    ("times_ms='{\"a\": 1}'", "times_ms is not a JSON list"),
    ("median_ms='fast'", "median_ms is not a number"),
    ("status='splendid'", "unknown status"),
    ("gpu=x'ff'", "gpu is not text"),  # a blob: SQLite would turn a number into text
    ("reason=CAST(x'6f6bff' AS TEXT)", "reason is not UTF-8 text"),  # a flipped byte: Python's sqlite3 cannot read it
])
def test_a_damaged_row_is_skipped_and_named_by_id(tmp_path, sql, why):
    path, ids = stored(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE evaluations SET {sql} WHERE id=?", (ids[1],))
    db.close()
    with Store(path, readonly=True) as store:
        kept = store.evaluations()
        assert [e.id for e in kept] == [ids[0], ids[2]]
        assert store.lookup("s1", PROBLEM.key, "", {}) is None  # a damaged measurement is never served
    line = store.skipped.line(path)
    assert f"1 damaged row (id {ids[1]}: " in line and why in line and "\n" not in line


def test_text_that_is_not_utf8_in_metadata_reads_as_absent(tmp_path):
    path, ids = stored(tmp_path, 2)
    with Store(path) as store:
        store.set_meta("experiment", "x")
        store.set_meta("seed", 3)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value=CAST(x'22ff22' AS TEXT) WHERE key='seed'")
        db.execute("UPDATE evaluations SET genome=CAST(x'7bff7d' AS TEXT) WHERE id=?", (ids[0],))
    db.close()
    with Store(path, readonly=True) as store:
        assert store.all_meta() == {"experiment": "x"} and store.meta("seed", "none") == "none"
        assert [e.id for e in store.evaluations()] == [ids[1]] and store.problem_keys() == [PROBLEM.key]
    assert "genome is not UTF-8 text" in store.skipped.line(path)


def test_damaged_metadata_reads_as_absent(tmp_path):
    path, _ = stored(tmp_path, 1)
    with Store(path) as store:
        store.set_meta("seed", 3)
        store.set_meta("experiment", "x")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value='{broken' WHERE key='seed'")
    db.close()
    with Store(path, readonly=True) as store:
        assert store.meta("seed", "none") == "none"
        assert store.all_meta() == {"experiment": "x"}


_COLUMN_VALUES = st.one_of(st.none(), st.integers(), st.floats(allow_nan=True), st.text(max_size=30),
                           st.sampled_from(["{}", "[]", "[1,2]", "null", '{"genes": 3}', '"x"', "{\"operator\": 1}"]))
_COLUMNS = ["problem", "genome", "versions", "times_ms", "resources", "parents", "status", "median_ms", "gpu",
            "objective", "problem_key", "started_at", "reason", "call_ms"]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(_COLUMNS), _COLUMN_VALUES, min_size=1, max_size=4))
def test_any_column_garbage_is_a_bad_row_or_an_evaluation(garbage):
    row = good().to_row()
    row.update(garbage, id=7)
    try:
        ev = decode_row(row)
    except BadRow as e:
        assert str(e) and "\n" not in str(e)
        return
    assert isinstance(ev, Evaluation) and Problem.from_json(ev.problem).key == ev.problem_key
    assert ev.fitness_ms is None or ev.fitness_ms == ev.fitness_ms  # a number, never NaN or text
