"""`python -m benchmarks.measure_eval` on a GPU, small: candidates through the search's own Ray executor and
stages (compile ahead on CPU tasks, check and time on one GPU actor), then one kernel timed in two fresh worker
processes. Asserts what could really go wrong, not only a positive rate.

    python -m pytest tests/gpu/test_measure_eval.py -q -s
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


def test_measure_eval_small(tmp_path, monkeypatch):
    from benchmarks.measure_eval import main

    monkeypatch.setenv("OUT", str(tmp_path))
    assert main(["--count", "32", "--shape", "2048x2048x2048", "--compile-workers", "8", "--reps", "10",
                 "--repeat-reps", "50"]) == 0
    result = json.loads((tmp_path / "measure_eval.json").read_text())
    tp, rep = result["throughput"], result["repeatability"]
    statuses = tp["statuses"]
    assert sum(statuses.values()) == tp["candidates"] == 32
    assert set(statuses) <= {"ok", "compile_error", "out_of_resources"}, statuses  # no crash, timeout, error
    assert statuses.get("ok", 0) >= 16, statuses  # seeds and random valid genomes mostly compile and are correct
    assert tp["gpu_evaluated"] == statuses.get("ok", 0)  # every kernel that reached the GPU was correct
    assert tp["cache_hit_share"] == 1.0  # every first launch loaded what a CPU task compiled
    assert 0.2 < tp["busy_share"] <= 1.0 and 0 < tp["worker_busy_share"] <= 1.01
    assert tp["per_gpu_minute"] >= 100, tp
    assert [r["status"] for r in rep["runs"]] == ["ok", "ok"]
    assert rep["rel_diff"] is not None and rep["rel_diff"] <= 0.05, rep
    assert rep["baseline_rel_diff"] is not None and rep["baseline_rel_diff"] <= 0.05, rep
    assert result["gpu"] and result["versions"]["timing"]
