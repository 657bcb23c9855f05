"""The GPU scaling script (tests/gpu/scaling.py) without a GPU: its arguments are checked in one line before any
work, the experiment it runs per GPU count is valid, and its rate comes from the store the way the JSON says."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.experiment.config import parse_experiment
from evo.store import Store
from tests.fixtures.run_fixture import make_run
from tests.gpu import scaling

QUICK = Path(scaling.ROOT) / "experiments" / "quick_gemm.yaml"


@pytest.mark.parametrize("argv, words", [
    (["--minutes", "0"], "--minutes"), (["--gpus", "1", "1"], "--gpus"), (["--problem", "99"], "--problem"),
    (["--experiment", str(QUICK.parent / "smoke.yaml")], "smoke"), (["--experiment", "/nonexistent.yaml"], "no such"),
])
def test_bad_arguments_are_one_line(argv, words, capsys):
    assert scaling.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_without_enough_gpus_it_stops_before_any_work(capsys, monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert scaling.main(["--out", str(tmp_path)]) == 2
    assert "needs 2 CUDA GPUs and 0 are visible" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_each_run_is_the_problem_alone_on_n_gpus_for_a_wall_time():
    problem = parse_experiment(QUICK.read_text()).problems[0]
    text = scaling.scaled_experiment(QUICK.read_text(), problem.key, 2, 180.0, "scaling-2gpu")
    exp = parse_experiment(text, "scaled.yaml")
    assert [p.key for p in exp.problems] == [problem.key]
    assert exp.executor.gpus == 2 and exp.executor.kind == "ray" and exp.name == "scaling-2gpu"
    assert exp.budget.wall_s == 180.0 and exp.budget.evaluations is None and exp.budget.stagnation is None


def test_rate_is_evaluations_over_the_search_clock(tmp_path):
    run = make_run(tmp_path, shapes=("64x64x64",))
    key = "gemm:64x64x64:fp16"
    with Store(run / "store.sqlite") as store:
        store.set_meta(f"wall_s:{key}", 30.0)
        n, ok = store.count(key), len(store.evaluations(key, status="ok"))
    rate = scaling.count_rate(run / "store.sqlite", key)
    assert rate["evaluations"] == n and rate["per_minute"] == round(n * 2, 1) and rate["ok_per_minute"] == ok * 2
    assert scaling.gpu_slug("NVIDIA H200") == "nvidia-h200"


def test_worker_busy_share_is_its_rows_time_over_the_search_clock(tmp_path):
    run = make_run(tmp_path, shapes=("64x64x64",))
    key = "gemm:64x64x64:fp16"
    with Store(run / "store.sqlite") as store:
        store.set_meta(f"wall_s:{key}", 30.0)
        rows = store.evaluations(key)
    busy: dict[str, float] = {}
    for r in rows:
        busy[r.worker] = busy.get(r.worker, 0.0) + max(0.0, r.finished_at - r.started_at)
    rate = scaling.count_rate(run / "store.sqlite", key)
    assert rate["workers"] == sorted(w for w in busy if w)
    assert rate["worker_busy_share"] == {w: round(b / 30.0, 3) for w, b in sorted(busy.items()) if w}
    assert set(rate["mean_s"]) == {"compile", "load_s", "check_s", "time_s"}
    busy_now, total_now = scaling._cpu_ticks()
    assert 0 <= busy_now <= total_now
