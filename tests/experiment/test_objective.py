"""`evaluation.objective`: which clock is the fitness. Parsed from YAML (default call) with a one-line error for a
bad value, validated in the spec, and a setting that decides results: a resume under another objective is refused."""

from __future__ import annotations

import dataclasses

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.experiment.config import ConfigError, load_experiment, parse_experiment
from evo.experiment.resume_check import deciding, experiment_changes
from evo.experiment.spec import EvaluationSpec
from evo.search.run import StartupError, run_experiment
from tests.experiment.test_config import GOOD, ROOT
from tests.fixtures import search_fixtures as fx


def test_the_default_objective_is_the_call_clock():
    assert parse_experiment(GOOD).evaluation.objective == "call"
    assert EvaluationSpec().objective == "call"
    assert load_experiment(ROOT / "experiments" / "quick_gemm.yaml").evaluation.objective == "call"


@pytest.mark.parametrize("value", ["call", "gpu"], ids=["call_clock", "gpu_clock"])  # a bare "gpu" id marks a GPU test
def test_yaml_names_the_objective(value):
    exp = parse_experiment(GOOD + f"evaluation: {{objective: {value}, reps: 5}}\n")
    assert exp.evaluation.objective == value and exp.evaluation.reps == 5


@pytest.mark.parametrize("value", ["wall", "GPU", "1", "[call]"])
def test_a_bad_objective_is_one_line_naming_the_key(tmp_path, value):
    path = tmp_path / "exp.yaml"
    path.write_text(GOOD + f"evaluation: {{objective: {value}}}\n")
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    message = str(info.value)
    assert message.startswith(f"{path}: evaluation.objective: ") and "\n" not in message
    assert "call, gpu" in message


def test_the_spec_refuses_an_unknown_objective():
    with pytest.raises(ValueError, match="objective must be one of call, gpu, got 'host'"):
        EvaluationSpec(objective="host")


def test_the_objective_decides_results():
    call = parse_experiment(GOOD)
    gpu = dataclasses.replace(call, evaluation=dataclasses.replace(call.evaluation, objective="gpu"))
    assert deciding(call)["evaluation.objective"] == "call"
    assert experiment_changes(deciding(call), gpu) == ["evaluation.objective: 'call' -> 'gpu'"]
    assert experiment_changes(deciding(gpu), gpu) == []


def test_a_run_recorded_before_objectives_was_judged_by_gpu_time():
    exp = parse_experiment(GOOD)
    before = {k: v for k, v in deciding(exp).items() if k != "evaluation.objective"}  # an older evo's record
    assert experiment_changes(before, exp) == ["evaluation.objective: 'gpu' -> 'call'"]
    gpu = dataclasses.replace(exp, evaluation=dataclasses.replace(exp.evaluation, objective="gpu"))
    assert experiment_changes(before, gpu) == []
    assert experiment_changes({}, exp) == []  # nothing recorded at all: nothing to compare


def test_a_resume_under_another_objective_is_refused_unless_allowed(tmp_path, monkeypatch):
    fx.register(monkeypatch)
    first = fx.experiment(sizes=(256,), evaluations=4)
    assert first.evaluation.objective == "call"
    run_experiment(first, tmp_path / "r", executor=LocalExecutor(fx.StandInBackend()))
    gpu = dataclasses.replace(first, budget=dataclasses.replace(first.budget, evaluations=6),
                              evaluation=dataclasses.replace(first.evaluation, objective="gpu"))
    with pytest.raises(StartupError, match=r"evaluation\.objective: 'call' -> 'gpu'"):
        run_experiment(gpu, tmp_path / "r", resume=True, executor=LocalExecutor(fx.StandInBackend()))
    run_experiment(gpu, tmp_path / "r", resume=True, executor=LocalExecutor(fx.StandInBackend()),
                   allow_changes=True)
