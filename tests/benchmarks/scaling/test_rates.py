"""A run's rates and shares from synthetic rows: per minute of the problems' clocks, busy time from the rows a GPU
worker measured (not compile failures, not measurements served again), the queue weighted by time, the driver's
CPU share only when every problem stored it."""

from __future__ import annotations

import pytest

from benchmarks.scaling.rates import merge_queues, run_rates, speedups
from tests.benchmarks.scaling.synthetic import gemm, queue, row

A, B = gemm("64x64x64"), gemm("128x128x128")


def _rows():
    return [row(A, 10.0, 1.0, worker="w0", took=2.0), row(A, 11.0, None, "wrong", worker="w1", took=1.0),
            row(A, 12.0, None, "compile_error", gpu="", worker=""),  # failed before any GPU
            row(B, 20.0, 1.0, worker="store#3", took=0.0),  # served from the store: no GPU time
            row(B, 25.0, 0.5, worker="w0", took=3.0)]


def test_rates_are_per_minute_of_the_problems_clocks():
    r = run_rates(_rows(), {A.key: 20.0, B.key: 10.0}, {A.key: 3.0, B.key: 6.0}, [queue(1.0, 3, 20.0)])
    assert r["evaluations"] == 5 and r["ok"] == 3 and r["search_s"] == 30.0
    assert r["per_minute"] == 10.0 and r["ok_per_minute"] == 6.0
    assert r["driver_cpu_share"] == 0.3  # 9 CPU seconds in 30 s
    assert r["span_s"] == 17.0  # first measured start (8.0) to last finish (25.0)


def test_busy_time_is_what_gpu_workers_measured():
    r = run_rates(_rows(), {A.key: 20.0, B.key: 10.0})
    assert r["workers"] == ["w0", "w1"]
    assert r["worker_busy_share"] == {"w0": round(5.0 / 30, 3), "w1": round(1.0 / 30, 3)}
    assert r["busy_share_min"] == round(1.0 / 30, 3)
    assert r["busy_share_mean"] == round((round(5.0 / 30, 3) + round(1.0 / 30, 3)) / 2, 3)
    assert r["busy_share_of_span"]["w0"] == round(5.0 / 17.0, 3)
    assert r["mean_s"]["compile"] == 0.2


def test_no_clock_gives_no_rate_and_a_missing_cpu_gives_no_share():
    r = run_rates(_rows(), {A.key: 0.0})
    assert r["per_minute"] is None and r["ok_per_minute"] is None and r["worker_busy_share"] == {}
    assert run_rates(_rows(), {A.key: 20.0, B.key: 10.0}, {A.key: 3.0, B.key: None})["driver_cpu_share"] is None
    empty = run_rates([], {})
    assert empty["evaluations"] == 0 and empty["span_s"] == 0.0 and empty["busy_share_min"] is None


def test_queues_merge_weighted_by_their_time():
    merged = merge_queues([queue(1.0, 3, 20.0), queue(4.0, 9, 10.0), None, {"seconds": 0}])
    assert merged["waiting"] == {"mean": 2.0, "max": 9}  # (1 x 20 + 4 x 10) / 30
    assert merge_queues([None, {"seconds": 0}]) is None


def test_speedups_are_over_the_reference_rate():
    assert speedups({1: 300.0, 2: 600.0, 4: None}, 1) == {"1": 1.0, "2": 2.0, "4": None}
    assert speedups({1: None, 2: 600.0}, 1) == {"1": None, "2": None}
    assert speedups({2: 500.0, 4: 1000.0}, 2)["4"] == pytest.approx(2.0)
