"""The compile queue over time: consecutive saves of a problem's cumulative summary become the mean over the stretch
between them, and the sampler reads those saves (and the rows so far) from the stores under a folder."""

from __future__ import annotations

import pytest

from benchmarks.scaling.queue import QueueSampler, queue_intervals
from evo.store import Store
from tests.benchmarks.scaling.synthetic import gemm, queue, row, write_store

A, B = gemm("64x64x64"), gemm("128x128x128")


def test_consecutive_saves_give_the_mean_between_them():
    snaps = [(5.0, A.key, queue(2.0, 4, 5.0)), (10.0, A.key, queue(3.0, 6, 10.0)),
             (10.5, A.key, queue(3.0, 6, 10.0)),  # saved again with nothing new: skipped
             (12.0, B.key, queue(1.0, 1, 1.5))]
    out = queue_intervals(snaps)
    assert [(e["t"], e["problem"], e["seconds"]) for e in out] == [(5.0, A.key, 5.0), (10.0, A.key, 5.0),
                                                                  (12.0, B.key, 1.5)]
    assert out[0]["waiting"] == 2.0
    assert out[1]["waiting"] == pytest.approx(4.0)  # (3 x 10 - 2 x 5) / 5: the queue grew in the second stretch
    assert out[2]["compiling"] == 1.0


def test_a_save_that_covers_less_time_starts_again_and_bad_saves_are_skipped():
    snaps = [(1.0, A.key, queue(2.0, 2, 8.0)), (2.0, A.key, queue(5.0, 5, 3.0)),  # a resumed session restarted
             (3.0, A.key, {"seconds": 0}), (4.0, A.key, None), (5.0, B.key, queue(9.0, 9, 4.0))]
    out = queue_intervals(sorted(snaps, key=lambda s: -s[0]))  # read in any order: sorted by time
    assert [(e["problem"], e["seconds"], e["ready"]) for e in out] == [(A.key, 8.0, 2.0), (A.key, 3.0, 5.0),
                                                                      (B.key, 4.0, 9.0)]
    shrink = [(1.0, A.key, queue(4.0, 4, 2.0)), (2.0, A.key, queue(0.5, 4, 4.0))]
    assert queue_intervals(shrink)[1]["waiting"] == 0.0  # rounding in the saves never makes a count negative


def test_the_sampler_reads_every_store_under_the_folder(tmp_path):
    one = write_store(tmp_path / "a" / "store.sqlite", [row(A, 1.0, 1.0), row(A, 2.0, 2.0)],
                      {f"queue:{A.key}": queue(1.0, 2, 3.0)})
    write_store(tmp_path / "b" / "deeper" / "store.sqlite", [row(B, 1.0, 1.0)], {"wall_s:x": 1.0})
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "store.sqlite").write_text("not a store")  # being created, or damaged: read next time
    sampler = QueueSampler(tmp_path, period_s=60)
    sampler.sample()
    sampler.sample()  # the same save again: kept once
    with Store(one) as store:
        store.set_meta(f"queue:{A.key}", queue(2.0, 3, 6.0))
    sampler.start()
    sampler.stop()  # reads once more as it stops
    assert [(key, s["seconds"]) for _, key, s in sampler.snapshots] == [(A.key, 3.0), (A.key, 6.0)]
    assert [n for _, n in sampler.rows] == [3, 3, 3]
