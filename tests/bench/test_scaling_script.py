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


LLM = QUICK.parent / "llm_gemm.yaml"
LLAMA = QUICK.parent / "models" / "llama-3-8b.json"


@pytest.mark.parametrize("argv, words", [
    (["--problems", "0"], "--problems 0"), (["--problems", "2", "2"], "distinct"), (["--problems", "x"], "'all'"),
    (["--evaluations", "0"], "--evaluations"), (["--zoo", "/nonexistent.json"], "nonexistent"),
    (["--zoo", str(LLAMA), "--operator", "attention"], "--operator 'attention'"),
])
def test_bad_multi_problem_arguments_are_one_line(argv, words, capsys):
    assert scaling.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_several_problems_run_in_turn_with_the_time_shared_and_the_surrogate_switched():
    args = scaling.build_parser().parse_args(["--experiment", str(LLM), "--problems", "all"])
    text, label = scaling.experiment_source(args)
    llm = parse_experiment(text)
    chosen = scaling.chosen_problems(args, len(llm.problems))
    assert chosen == list(range(10)) and label == "llm_gemm"
    keys = [llm.problems[i].key for i in chosen]
    on = parse_experiment(scaling.scaled_experiment(text, keys, 2, 18.0, "s", surrogate=True, evaluations=50))
    assert [p.key for p in on.problems] == keys and on.executor.gpus == 2 and not on.memory.enabled
    assert on.budget.wall_s == 18.0 and on.budget.evaluations == 50 and on.budget.stagnation is None
    assert on.emitters == llm.emitters and "guided" in [e.name for e in on.emitters]  # on by default: kept as is
    off = parse_experiment(scaling.scaled_experiment(text, keys[::-1], 1, 6.0, "s", surrogate=False))
    assert [p.key for p in off.problems] == keys[::-1]
    assert [e.name for e in off.emitters] == ["variation", "exploit", "restart"]
    without = text + "\nemitters: [variation]\n"
    back = parse_experiment(scaling.scaled_experiment(without, keys[:1], 1, 6.0, "s", surrogate=True))
    assert [e.name for e in back.emitters] == ["variation", "guided"]
    picked = scaling.build_parser().parse_args(["--experiment", str(LLM), "--problems", "3", "1"])
    assert scaling.chosen_problems(picked, 10) == [2, 0]


def test_the_zoo_experiment_of_a_model_is_every_shape_of_its_operator():
    # above 16 tokens: at 16 or fewer the zoo plans the `linear` decode roles, not gemm
    args = scaling.build_parser().parse_args(["--zoo", str(LLAMA), "--tokens", "32,128"])
    assert scaling.check_args(args) is None
    text, label = scaling.experiment_source(args)
    exp = parse_experiment(text)
    assert label == "llama-3-8b_gemm" and exp.operator == "gemm" and len(exp.problems) >= 2
    assert {p.sizes[0] for p in exp.problems} == {32, 128}  # M is the token count


def test_several_problems_add_up_their_clocks_busy_time_queues_and_cpu(tmp_path):
    run = make_run(tmp_path, shapes=("64x64x64", "128x128x128"))
    keys = ["gemm:64x64x64:fp16", "gemm:128x128x128:fp16"]
    queue = lambda mean, most, s: {"seconds": s, **{k: {"mean": mean, "max": most} for k in  # noqa: E731
                                                    ("waiting", "compiling", "ready", "at_workers")}}
    with Store(run / "store.sqlite") as store:
        for key, wall, cpu, q in zip(keys, (20.0, 10.0), (5.0, 4.0), (queue(1.0, 3, 20.0), queue(4.0, 9, 10.0)),
                                     strict=True):
            store.set_meta(f"wall_s:{key}", wall)
            store.set_meta(f"cpu_s:{key}", cpu)
            store.set_meta(f"queue:{key}", q)
        rows = store.evaluations()
    rate = scaling.count_rate(run / "store.sqlite", keys)
    assert rate["evaluations"] == len(rows) and rate["search_s"] == 30.0 and rate["per_minute"] == len(rows) * 2
    assert rate["driver_cpu_share"] == 0.3  # 9 CPU seconds in 30 s of search
    assert rate["compile_queue"]["waiting"] == {"mean": 2.0, "max": 9}  # (1 x 20 + 4 x 10) / 30
    busy = sum(r.finished_at - r.started_at for r in rows if r.worker == rate["workers"][0])
    assert rate["worker_busy_share"][rate["workers"][0]] == round(busy / 30.0, 3)
    one = scaling.count_rate(run / "store.sqlite", keys[0])
    assert one["search_s"] == 20.0 and one["driver_cpu_share"] == 0.25 and one["compile_queue"]["ready"]["max"] == 3
