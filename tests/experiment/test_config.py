"""Experiment files: the shipped ones load; every kind of mistake is one line naming the file and key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.experiment.config import ConfigError, load_experiment, parse_experiment, parse_shape
from evo.surface.cli import main

ROOT = Path(__file__).resolve().parents[2]
GOOD = """\
name: t
operator: gemm
problems:
  shapes: [64x64x64, [32, 96, 64]]
  dtypes: [fp16]
"""


@pytest.mark.parametrize("name", ["quick_gemm", "llm_gemm", "smoke"])
def test_shipped_experiments_load(name):
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    assert exp.name == name
    assert exp.operator == "gemm"
    assert exp.source.startswith("#")  # the text is kept for the run directory's copy
    assert all(p.operator == "gemm" for p in exp.problems)


def test_shipped_experiments_match_their_promises():
    quick = load_experiment(ROOT / "experiments" / "quick_gemm.yaml")
    assert 2 <= len(quick.problems) <= 3 and {p.dtype for p in quick.problems} == {"bf16"}
    assert 150 <= quick.budget.evaluations <= 250
    llm = load_experiment(ROOT / "experiments" / "llm_gemm.yaml")
    assert {p.shape_text for p in llm.problems} == {
        "4096x4096x4096", "8192x8192x8192", "4096x6144x4096", "4096x28672x4096", "4096x4096x14336",
        "16x4096x4096", "16x28672x4096", "128x4096x14336", "1000x3000x2000", "2048x2048x16384"}
    smoke = load_experiment(ROOT / "experiments" / "smoke.yaml")
    assert smoke.executor.kind == "smoke"
    assert {p.dtype for p in smoke.problems} <= {"fp16", "fp32"}
    assert max(max(p.sizes) for p in smoke.problems) <= 128
    assert "NOT a timing" in smoke.source


def test_good_experiment_defaults_and_forms():
    exp = parse_experiment(GOOD + "genome:\n  BLOCK_M: [32, 64]\n  persistent: false\n"
                                  "descriptors: [tile_area, {name: block_k, edges: [4, 5, 6]}]\n", "x.yaml")
    assert [p.key for p in exp.problems] == ["gemm:64x64x64:fp16", "gemm:32x96x64:fp16"]
    assert exp.genome == {"BLOCK_M": [32, 64], "persistent": [False]}
    assert exp.descriptors[1].edges == (4.0, 5.0, 6.0)
    assert exp.budget.evaluations == 200 and exp.executor.kind == "ray" and exp.seed == 0


def test_problem_groups_list_form():
    exp = parse_experiment("operator: gemm\nproblems:\n  - {shapes: [64x64x64], dtypes: [fp16]}\n"
                           "  - {shapes: [64x64x64], dtypes: [fp32]}\n", "x.yaml", default_name="from_file")
    assert [p.dtype for p in exp.problems] == ["fp16", "fp32"]
    assert exp.name == "from_file"


@pytest.mark.parametrize("text", ["4096x4096x4096", [4096, 4096, 4096], " 4096X4096x4096 "])
def test_parse_shape_forms(text):
    assert parse_shape(text) == (4096, 4096, 4096)


@pytest.mark.parametrize("text", ["4096x", "ax3", "0x4x4", "", [1, -2], [1.5], True, None])
def test_parse_shape_rejects(text):
    with pytest.raises(ValueError):
        parse_shape(text)


# (YAML appended to / replacing the good file, key path expected in the message, words expected in it)
CASES = {
    "unknown top key": (GOOD + "budgett: {evaluations: 3}\n", "budgett", "unknown key"),
    "unknown nested key": (GOOD + "budget: {evals: 3}\n", "budget.evals", "unknown key"),
    "wrong type int": (GOOD + "budget: {evaluations: many}\n", "budget.evaluations", "expected an integer"),
    "bool is not int": (GOOD + "seed: true\n", "seed", "expected an integer"),
    "wrong type bool": (GOOD + "transfer: 1\n", "transfer", "true or false"),
    "zero budget": (GOOD + "budget: {evaluations: 0}\n", "budget.evaluations", ">= 1"),
    "no budget at all": (GOOD + "budget: {evaluations: null}\n", "budget", "never stops"),
    "noise margin": (GOOD + "evaluation: {noise_margin: 1.5}\n", "evaluation.noise_margin", "< 1"),
    "negative timeout": (GOOD + "evaluation: {timeout_s: -1}\n", "evaluation.timeout_s", "> 0"),
    "zero timing budget": (GOOD + "evaluation: {budget_ms: 0}\n", "evaluation.budget_ms", "> 0"),
    "zero gpus": (GOOD + "executor: {gpus: 0}\n", "executor.gpus", ">= 1"),
    "executor kind": (GOOD + "executor: {kind: slurm}\n", "executor.kind", "ray, local, smoke"),
    "address without ray": (GOOD + "executor: {kind: local, address: auto}\n", "executor.address", "ray"),
    "unknown operator": (GOOD.replace("operator: gemm", "operator: conv2d"), "operator", "gemm"),
    "missing operator": (GOOD.replace("operator: gemm\n", ""), "operator", "required"),
    "unknown gene": (GOOD + "genome: {BLOCK_Q: [16]}\n", "genome.BLOCK_Q", "unknown key"),
    "gene value": (GOOD + "genome: {BLOCK_M: [32, 48]}\n", "genome.BLOCK_M[1]", "domain"),
    "bool gene given int": (GOOD + "genome: {persistent: [1]}\n", "genome.persistent[0]", "domain"),
    "infeasible genome": (GOOD + "genome: {BLOCK_M: [256], BLOCK_N: [256], num_warps: [2]}\n", "genome",
                          "no valid genome"),
    # a backend whose rules the other restrictions break: named, before any worker starts (was a traceback)
    "gluon with pointer loads": (GOOD + "genome: {backend: [gluon], memory: [pointer]}\n", "genome",
                                 "every genome they allow breaks a rule (the Gluon rendering holds "
                                 "memory=host_descriptor)"),
    "gluon in a smoke run": (GOOD + "executor: {kind: smoke}\ngenome: {backend: [gluon]}\n", "genome",
                             "does not run in Triton's CPU interpreter"),
    "a 5000-digit number": (GOOD + "seed: " + "9" * 5000 + "\n", "", "holds a number of 5,000 digits (line 6)"),
    "unknown descriptor": (GOOD + "descriptors: [tile_area, bogus]\n", "descriptors[1]", "tile_area"),
    "descriptor twice": (GOOD + "descriptors: [tile_area, tile_area]\n", "descriptors[1]", "twice"),
    "edges not increasing": (GOOD + "descriptors: [{name: block_k, edges: [4, 4]}]\n", "descriptors[0].edges",
                             "increase"),
    "bad shape text": (GOOD.replace("64x64x64", "64x64xabc"), "problems.shapes[0]", "MxNxK"),
    "wrong number of dims": (GOOD.replace("64x64x64", "64x64"), "problems.shapes[0]", "3 dimensions"),
    "bad dtype": (GOOD.replace("[fp16]", "[fp8]"), "problems.dtypes[0]", "fp16"),
    "duplicate problem": (GOOD.replace("[32, 96, 64]", "64x64x64"), "problems.shapes[1]", "twice"),
    "unknown mutator": (GOOD + "mutators: {teleport: 1}\n", "mutators.teleport", "unknown key"),
    "negative weight": (GOOD + "mutators: {mutate: -1}\n", "mutators.mutate", "> 0"),
    "unknown selection": (GOOD + "selection: greedy\n", "selection", "uniform"),
    "bad name": (GOOD.replace("name: t", "name: a/b"), "name", "run directory"),
    "not a mapping": ("- just\n- a list\n", "", "expected a mapping"),
    "duplicate key": (GOOD + "seed: 1\nseed: 2\n", "", "duplicate key 'seed'"),
    "invalid yaml": (GOOD + "budget: {evaluations: 3\n", "", "not valid YAML"),
    "unknown emitter": (GOOD + "emitters: [variation, teleport]\n", "emitters[1]", "unknown emitter"),
    "emitter twice": (GOOD + "emitters: [guided, guided]\n", "emitters[1]", "twice"),
    "bad emitter setting": (GOOD + "emitters: [{name: guided, explore: 2}]\n", "emitters[0]", "explore"),
    "unknown emitter setting": (GOOD + "emitters: [{name: exploit, depth: 2}]\n", "emitters[0]", "depth"),
    "emitter without name": (GOOD + "emitters: [{pool: 3}]\n", "emitters[0].name", "required"),
    "empty emitters": (GOOD + "emitters: []\n", "emitters", "non-empty list"),
    "unknown scheduler": (GOOD + "scheduler: greedy\n", "scheduler", "bandit"),
    "sol above one": (GOOD + "budget: {evaluations: 3, sol: 1.5}\n", "budget.sol", "< 1.0"),
    "negative floor": (GOOD + "budget: {wall_s: 5, min_evaluations: -1}\n", "budget.min_evaluations", ">= 0"),
    "floor not a count": (GOOD + "budget: {wall_s: 5, min_evaluations: 2.5}\n", "budget.min_evaluations",
                          "expected an integer"),
    "floor over the limit": (GOOD + "budget: {evaluations: 10, min_evaluations: 20}\n", "budget.min_evaluations",
                             "more than budget.evaluations"),
    "memory key": (GOOD + "memory: {path: x.db}\n", "memory.path", "unknown key"),
    "memory seed": (GOOD + "memory: {seed: -1}\n", "memory.seed", "integer >= 0"),
    "seeds not bool": (GOOD + "seeds: 0\n", "seeds", "true or false"),
}


def test_emitters_memory_and_sol_keys():
    exp = parse_experiment(GOOD + "budget: {evaluations: 3, sol: 0.9}\n"
                           "emitters: [restart, {name: guided, pool: 8}]\nmemory: false\nseeds: false\n")
    assert [e.name for e in exp.emitters] == ["restart", "guided"] and dict(exp.emitters[1].settings) == {"pool": 8}
    assert exp.budget.sol == 0.9 and not exp.memory.enabled and not exp.seeds
    assert exp.budget.min_evaluations == 24 and exp.budget.floor == 3  # the default floor fits the limit
    assert parse_experiment(GOOD + "budget: {wall_s: 9, min_evaluations: 40}\n").budget.floor == 40
    default = parse_experiment(GOOD)
    assert [e.name for e in default.emitters] == ["variation", "guided", "exploit", "restart"]
    assert default.memory.enabled and default.memory.db is None and default.scheduler == "bandit"


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_mistake_is_one_line_exit_2(case, tmp_path, capsys):
    text, key_path, words = CASES[case]
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    if key_path:
        assert f": {key_path}: " in message
    assert words in message
    assert "\n" not in message

    assert main(["run", str(path)]) == 2  # the CLI stops before any work
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and str(path) in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def test_missing_and_unreadable_files(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["run", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    (tmp_path / "bin.yaml").write_bytes(b"\xff\xfe\x00bad")
    assert main(["run", str(tmp_path / "bin.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_documented_example_is_a_valid_experiment():
    """The schema example in docs/experiments.md must stay a valid experiment."""
    text = (ROOT / "docs" / "experiments.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    exp = parse_experiment(block, "docs/experiments.md")
    assert exp.name == "quick_gemm" and exp.genome["warp_specialize"] == [False]
    assert exp.descriptors[1].name == "split_k" and exp.descriptors[1].edges == (0.0, 1.0, 2.0, 3.0, 4.0)


@pytest.mark.slow
def test_a_run_directorys_own_copy_skips_the_feasibility_draws(monkeypatch, tmp_path):
    """`evo status` (and export, report) read the run's experiment copy without drawing a genome per problem: the
    copy was checked when the run started, and on 10,000 problems the draws made Ctrl-C take 20 s to return."""
    import evo.experiment.config as config

    drawn: list[int] = []
    real = config._check_feasible
    monkeypatch.setattr(config, "_check_feasible", lambda c, op, problems, *a: drawn.append(len(problems)) or
                        real(c, op, problems, *a))
    path = ROOT / "experiments" / "smoke.yaml"
    assert load_experiment(path).problems and drawn == [2]  # smoke.yaml restricts genes: its problems are drawn
    assert load_experiment(path, check_feasible=False).problems and drawn == [2]
    run = tmp_path / "run"
    assert main(["run", str(path), "--out", str(run)]) == 0
    count = len(drawn)
    assert main(["status", str(run)]) == 0 and len(drawn) == count
