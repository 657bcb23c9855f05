"""A run's record from the stores under its folder (one per operator in a zoo run, merged), and the copy of a
store that keeps its rows and metadata without the kernel texts."""

from __future__ import annotations

import sqlite3

from benchmarks.scaling.stores import read_run, slim_copy
from evo.store import Store
from tests.benchmarks.scaling.synthetic import gemm, queue, row, write_store

A, B, C = gemm("64x64x64"), gemm("128x128x128"), gemm("256x256x256")


def test_the_stores_of_a_run_merge_by_problem(tmp_path):
    write_store(tmp_path / "zoo" / "op1" / "store.sqlite", [row(A, 1.0, 1.0), row(A, 2.0, 0.5)],
                {"problems": [A.key, C.key], f"wall_s:{A.key}": 12.0, f"cpu_s:{A.key}": 2.0,
                 f"queue:{A.key}": queue(1.0, 2, 12.0), f"summary:{A.key}": {"reason": "wall_s"}})
    write_store(tmp_path / "zoo" / "op2" / "store.sqlite", [row(B, 3.0, 2.0)],
                {"problems": [B.key], f"wall_s:{B.key}": 5.0})
    record = read_run(tmp_path)
    assert list(record.rows) == [A.key, C.key, B.key] and len(record.stores) == 2
    assert [r.fitness_ms for r in record.rows[A.key]] == [1.0, 0.5] and record.rows[C.key] == []
    assert record.clocks == {A.key: 12.0, C.key: 0.0, B.key: 5.0}  # C planned, never started
    assert record.cpu[A.key] == 2.0 and record.cpu[B.key] is None and record.queues[A.key]["seconds"] == 12.0
    assert record.ended == {A.key} and len(record.all_rows) == 3 and record.skipped_rows == 0
    assert read_run(tmp_path / "nothing-here").rows == {}


def test_a_slim_copy_keeps_rows_and_metadata_but_no_kernel_text(tmp_path):
    rows = [row(A, float(i), 1.0 + i) for i in range(30)]
    src = write_store(tmp_path / "run" / "store.sqlite", rows, {f"wall_s:{A.key}": 9.0})
    dst = slim_copy(src, tmp_path / "kept" / "store.sqlite")
    assert dst.stat().st_size < src.stat().st_size
    assert not (tmp_path / "kept" / "store.sqlite-wal").exists()
    with Store(dst, readonly=True) as store:
        assert [r.fitness_ms for r in store.evaluations()] == [r.fitness_ms for r in rows]
        assert store.meta(f"wall_s:{A.key}") == 9.0
    with sqlite3.connect(dst) as db:
        assert db.execute("SELECT count(*) FROM sources").fetchone() == (0,)
    slim_copy(src, dst)  # again over an earlier copy
    assert read_run(tmp_path / "kept").clocks == {A.key: 9.0}
