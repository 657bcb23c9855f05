"""What a scaling run runs, without a GPU: the experiment's problems in turn with the wall time shared and the
surrogate switched, the run's own GPUs, Triton cache and results database, and a model's zoo planned by `evo zoo`
itself (its refusals in one line)."""

from __future__ import annotations

import sys

import pytest

from benchmarks.scaling.runner import ROOT
from benchmarks.scaling.workloads import experiment_workload, run_env, scaled_experiment, zoo_workload
from evo.experiment.config import load_experiment, parse_experiment

EXPERIMENTS = ROOT / "experiments"
LLM, QUICK = EXPERIMENTS / "llm_gemm.yaml", EXPERIMENTS / "quick_gemm.yaml"


def test_an_experiment_runs_its_problems_in_turn_with_the_wall_time_shared(tmp_path):
    w = experiment_workload(LLM, None, 120.0, True)
    llm = load_experiment(LLM)
    assert w.name == "llm_gemm" and w.problems == tuple(p.key for p in llm.problems)
    assert w.settings["wall_s_per_problem"] == 12.0 and w.settings["surrogate"] is True
    command = w.command(2, tmp_path / "2gpu")
    assert command[:4] == [sys.executable, "-m", "evo", "run"] and command[-1] == str(tmp_path / "2gpu" / "run")
    exp = load_experiment(command[4])
    assert exp.executor.gpus == 2 and exp.executor.kind == "ray" and exp.name == "llm_gemm-2gpu"
    assert [p.key for p in exp.problems] == list(w.problems) and not exp.memory.enabled
    assert exp.budget.wall_s == 12.0 and exp.budget.evaluations is None and exp.budget.stagnation is None
    assert "guided" in [e.name for e in exp.emitters]
    picked = experiment_workload(LLM, ["3", "1"], 60.0, False, evaluations=50)
    assert picked.name == "llm_gemm-2problems" and picked.problems == (w.problems[2], w.problems[0])
    one = load_experiment(picked.command(1, tmp_path / "1gpu")[4])
    assert one.budget.wall_s == 30.0 and one.budget.evaluations == 50
    assert "guided" not in [e.name for e in one.emitters]


@pytest.mark.parametrize("path, choice, words", [
    (LLM, ["0"], "--problems 0"), (LLM, ["2", "2"], "distinct"), (LLM, ["x"], "'all'"),
    (EXPERIMENTS / "smoke.yaml", None, "smoke"), (EXPERIMENTS / "nonexistent.yaml", None, "nonexistent"),
])
def test_bad_experiments_and_choices_are_one_line(path, choice, words):
    with pytest.raises(ValueError, match=words) as e:
        experiment_workload(path, choice, 60.0, True)
    assert "\n" not in str(e.value)


def test_the_surrogate_switch_adds_or_removes_the_guided_emitter():
    text = QUICK.read_text()
    key = parse_experiment(text).problems[0].key
    off = parse_experiment(scaled_experiment(text, [key], 1, 6.0, "s", surrogate=False))
    assert [e.name for e in off.emitters] == ["variation", "exploit", "restart"]
    back = parse_experiment(scaled_experiment(text + "\nemitters: [variation]\n", key, 1, 6.0, "s", surrogate=True))
    assert [e.name for e in back.emitters] == ["variation", "guided"]
    kept = parse_experiment(scaled_experiment(text, key, 1, 6.0, "s"))
    assert kept.emitters == parse_experiment(text).emitters


def test_each_run_has_its_own_gpus_cache_and_results_database(tmp_path):
    folder = tmp_path / "llm" / "2gpu"
    env = run_env(2, folder, tmp_path / "caches", {"PATH": "/bin"})
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and env["PATH"] == "/bin"
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "caches" / "triton-llm-2gpu")
    assert env["EVO_RESULTS_DB"] == str(folder / "results.sqlite")
    assert run_env(2, folder, tmp_path, {"CUDA_VISIBLE_DEVICES": "4,5,6"})["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_a_zoo_is_planned_by_evo_zoo_and_run_by_evo_zoo_run(tmp_path):
    w = zoo_workload(EXPERIMENTS / "models" / "tiny.yaml", "1", 16, 3.0, None, tmp_path / "plan")
    assert w.name == "zoo-tiny" and w.settings["operators"] >= 5 and len(w.problems) >= 7
    assert any(k.startswith("cache_attention:") for k in w.problems)
    command = w.command(4, tmp_path / "4gpu")
    assert command[:4] == [sys.executable, "-m", "evo", "zoo"] and command[-3:] == ["-o", str(tmp_path / "4gpu" /
                                                                                             "zoo"), "--run"]
    assert command[command.index("--wall-s") + 1] == "3" and command[command.index("--context") + 1] == "16"
    assert sorted(p.name for p in (tmp_path / "plan" / "tiny").glob("*.yaml"))  # the plan, as evo zoo wrote it
    with pytest.raises(ValueError, match="already holds files"):  # another plan there would be read as this one's
        zoo_workload(EXPERIMENTS / "models" / "tiny.yaml", "1", 16, 3.0, None, tmp_path / "plan")


def test_a_model_the_zoo_refuses_is_its_one_line(tmp_path):
    with pytest.raises(ValueError, match="no such file") as e:
        zoo_workload(tmp_path / "missing.json", "1", 0, 3.0, None, tmp_path / "plan")
    assert "\n" not in str(e.value) and str(e.value).startswith("evo zoo ")
