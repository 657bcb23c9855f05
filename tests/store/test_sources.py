"""Kernel sources kept in the store (evo.store.sources): once per distinct kernel, with the row that first names it;
older stores gain the table when opened for writing and read without it when opened read-only."""

from __future__ import annotations

import sqlite3

import pytest

from evo.problem import Problem
from evo.store.record import Evaluation
from evo.store.sources import source_hash
from evo.store.sqlite import Store

PROBLEM = Problem("toy", (("N", 8),), "fp16")
SOURCE = "import triton\n\n# a kernel module\n"
OTHER = "import triton\n\n# another kernel module\n"


def _row(source: str, genome_hash: str = "g0", status: str = "ok") -> Evaluation:
    return Evaluation(operator="toy", problem_key=PROBLEM.key, problem=PROBLEM.to_json(),
                      genome='{"family": "toy", "genes": {}}', genome_hash=genome_hash,
                      source_hash=source_hash(source), status=status, gpu="TEST DATA (not a GPU)")


def test_the_source_is_kept_once_per_kernel(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        assert store.keeps_sources and store.source(source_hash(SOURCE)) is None
        store.add(_row(SOURCE, "g0"), SOURCE)
        store.add(_row(SOURCE, "g1", "wrong"), SOURCE)  # a second row of the same kernel: the text is not copied
        store.add(_row(OTHER, "g2"))  # a row given no source keeps none
        assert store.source(source_hash(SOURCE)) == SOURCE
        assert store.source(source_hash(OTHER)) is None and store.source("") is None
        count = store._db.execute("SELECT COUNT(*) FROM sources").fetchone()[0]
    assert count == 1
    with Store(tmp_path / "s.sqlite", readonly=True) as store:
        assert store.source(source_hash(SOURCE)) == SOURCE


def test_a_source_that_is_not_the_rows_is_refused_and_nothing_is_written(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(ValueError, match="does not hash to"):
            store.add(_row(SOURCE), OTHER)
        assert store.count() == 0 and store.source(source_hash(OTHER)) is None


def test_a_damaged_source_is_not_served(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        store.add(_row(SOURCE), SOURCE)
        with store._db:
            store._db.execute("UPDATE sources SET source = ?", (SOURCE + "# edited\n",))
        assert store.source(source_hash(SOURCE)) is None


def _old_store(path):
    """A store as evo made it before sources were kept: its two tables, one row."""
    with Store(path) as store:
        store.add(_row(SOURCE))
    db = sqlite3.connect(path)
    db.execute("DROP TABLE sources")
    db.commit()
    db.close()


def test_an_older_store_reads_without_the_table_and_gains_it_when_written(tmp_path):
    path = tmp_path / "old.sqlite"
    _old_store(path)
    with Store(path, readonly=True) as store:
        assert not store.keeps_sources and store.source(source_hash(SOURCE)) is None
        assert [r.genome_hash for r in store.iter()] == ["g0"]
    with Store(path) as store:  # opened for writing: migrated
        assert store.keeps_sources and store.count() == 1
        store.add(_row(OTHER, "g1"), OTHER)
        assert store.source(source_hash(OTHER)) == OTHER and store.source(source_hash(SOURCE)) is None


def test_the_shared_results_database_keeps_the_sources_of_what_it_copies(tmp_path):
    from evo.store.shared import SharedResults

    with SharedResults(tmp_path / "results.sqlite") as shared:
        shared.record(_row(SOURCE), SOURCE)
        served = _row(OTHER, "g1")
        served.worker = "store#3"  # a served row is a copy already: neither it nor its source is stored again
        shared.record(served, OTHER)
        assert shared.source(source_hash(SOURCE)) == SOURCE and shared.source(source_hash(OTHER)) is None
