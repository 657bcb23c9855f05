"""The launch bench (benchmarks.launch) without a GPU: arguments and the work they plan, the one-line refusal,
one problem measured end to end on CPU tensors with stand-in timers (the figures are NOT timings), and the
JSON/markdown writer given SYNTHETIC TEST DATA."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.launch import DEFAULT_EXPERIMENTS, Job, build_parser, launch_main, measure_problem, plan_jobs
from benchmarks.launch_results import launch_paths, launch_table, to_markdown, write_launch
from evo.store.sqlite import Store
from tests.bench.test_bench import _stand_in_timer
from tests.bench.test_clocks_bench import _stand_in_clocks
from tests.fixtures.run_fixture import make_run
from tests.fixtures.toy_operator import register_toy

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX, RMSNORM = str(ROOT / "experiments" / "bench_softmax.yaml"), str(ROOT / "experiments" / "bench_rmsnorm.yaml")


def _plan(*argv: str):
    return plan_jobs(build_parser().parse_args(list(argv)))


# -- arguments ------------------------------------------------------------------------------------------------
def test_defaults_are_the_four_bench_experiments():
    args = build_parser().parse_args([])
    assert args.experiments == [] and args.evaluations == 100 and args.out == "reports/bench" and args.run is None
    assert [Path(p).name for p in DEFAULT_EXPERIMENTS] == ["bench_gemm_llm.yaml", "bench_gemm_ragged.yaml",
                                                          "bench_softmax.yaml", "bench_rmsnorm.yaml"]
    jobs = _plan("--max-problems", "1")
    assert [j.experiment.name for j in jobs] == ["bench_gemm_llm", "bench_gemm_ragged", "bench_softmax",
                                                 "bench_rmsnorm"]
    assert all(len(j.problems) == 1 and j.run is None for j in jobs)


def test_problems_name_shapes_of_any_experiment_and_positions_of_each():
    jobs = _plan(SOFTMAX, RMSNORM, "--problems", "softmax:8192x5000:bf16")
    assert [(j.experiment.name, [p.key for p in j.problems]) for j in jobs] == \
        [("bench_softmax", ["softmax:8192x5000:bf16"])]
    jobs = _plan(SOFTMAX, RMSNORM, "--problems", "8192x5000")  # a shape both experiments measure
    assert [[p.key for p in j.problems] for j in jobs] == [["softmax:8192x5000:bf16"], ["rmsnorm:8192x5000:bf16"]]
    jobs = _plan(SOFTMAX, RMSNORM, "--problems", "2-3", "--max-problems", "1")
    assert [[p.key for p in j.problems] for j in jobs] == [["softmax:32768x4096:bf16"], [jobs[1].problems[0].key]]
    assert jobs[1].problems[0] == jobs[1].experiment.problems[1]


@pytest.mark.parametrize("argv,words", [
    ([SOFTMAX, "--problems", "3x3"], "no problem '3x3'"),
    ([SOFTMAX, "--max-problems", "0"], "--max-problems"),
    ([SOFTMAX, "--evaluations", "0"], "--evaluations"),
    (["no/such.yaml"], "no/such.yaml"),
    ([SOFTMAX, "--run", "nowhere"], "holds no run"),
])
def test_bad_arguments_are_one_line_before_any_work(capsys, argv, words):
    assert launch_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_runs_pair_with_experiments_or_bring_their_own(tmp_path, monkeypatch, capsys):
    register_toy(monkeypatch)
    run = make_run(tmp_path, name="toyrun", operator="toy", shapes=("1000", "4096"), dtype="fp32",
                   descriptors=("block", "num_warps"), n_random=3)
    (job,) = _plan("--run", str(run))  # the run's own experiment.yaml
    assert job.run == run and job.experiment.name == "toyrun" and len(job.problems) == 2
    with pytest.raises(ValueError, match="one run per experiment"):
        _plan(SOFTMAX, RMSNORM, "--run", str(run))
    bare = tmp_path / "bare"
    bare.mkdir()
    (run / "store.sqlite").rename(bare / "store.sqlite")
    with pytest.raises(ValueError, match="name its experiment file too"):
        _plan("--run", str(bare))


def test_refuses_without_a_gpu_in_one_line(capsys, monkeypatch):
    import benchmarks.launch as launch

    monkeypatch.setattr(launch, "_cuda_visible", lambda: False)
    assert launch_main([SOFTMAX, "--max-problems", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA GPU" in err


# -- one problem on CPU (interpreter, stand-ins: not timings) ---------------------------------------------------
@pytest.mark.slow
def test_measure_problem_times_the_exported_module(tmp_path, monkeypatch):
    import operators
    from evo.experiment.config import load_experiment

    register_toy(monkeypatch)
    run = make_run(tmp_path, name="toyrun", operator="toy", shapes=("1000",), dtype="fp32",
                   descriptors=("block", "num_warps"), n_random=3)
    exp = load_experiment(run / "experiment.yaml")
    op = operators.get("toy")
    job = Job(exp, list(exp.problems), run)
    seen: list[int] = []
    with Store(run / "store.sqlite", readonly=True) as store:
        entry = measure_problem(op, exp.problems[0], store, job, kernels=tmp_path / "k", gpu="TEST (not a GPU)",
                                timer=_stand_in_timer([]), clocks=_stand_in_clocks(seen), device="cpu", seed=0, reps=5)
    assert seen == [2]  # the toy's one baseline (it has no torch.compile) and the exported elite
    assert entry["primary"] == "torch" and entry["experiment"] == "toyrun" and entry["operator"] == "toy"
    kernel = Path(entry["kernel"])
    assert kernel.exists() and "_evo_measure" in kernel.read_text()
    evo = entry["contenders"]["evo"]
    assert evo["status"] == "ok" and evo["call_ratio"] == 0.5 and evo["graph_ratio"] == 0.5  # stand-in: 10/20, 5/10
    # on CPU the module's own GPU timer refuses: said, not hidden
    assert "CUDA" in entry["selfcheck_error"] and "selfcheck_ratio" not in entry


# -- the writer (SYNTHETIC TEST DATA) ---------------------------------------------------------------------------
def _c(median, call, graph, host):
    return {"status": "ok", "median_ms": median, "call_ms": call, "graph_ms": graph, "host_us": host}


def launch_doc() -> dict:
    """Made-up numbers, not a measurement."""
    gemm = {"experiment": "t", "operator": "gemm", "key": "gemm:16x4096x4096:bf16", "M": 16, "N": 4096, "K": 4096,
            "dtype": "bf16", "dims": ["M", "N", "K"], "primary": "cublas", "objective": "call",
            "contenders": {"cublas": _c(0.02, 0.03, 0.02, 6.0), "torch_compile": _c(0.025, 0.06, None, 40.0),
                           "evo": _c(0.01, 0.02, 0.01, 12.0)},
            "selfcheck_ratio": 1.45, "header_ratio": 1.5}
    softmax = {"experiment": "t", "operator": "softmax", "key": "softmax:8192x8192:bf16", "rows": 8192, "cols": 8192,
               "dtype": "bf16", "dims": ["rows", "cols"], "primary": "torch_eager", "objective": "gpu",
               "contenders": {"torch_eager": _c(0.2, 0.2, 0.2, 8.0),
                              "torch_compile": {"status": "skipped", "reason": "unavailable: test"},
                              "evo": _c(0.1, 0.1, 0.1, 9.0)},
               "selfcheck_error": "RuntimeError: test"}
    return {"schema": 1, "kind": "launch", "gpu": "TEST-GPU synthetic", "versions": {"torch": "test"},
            "problems": [gemm, softmax], "failures": [{"key": "rmsnorm:1x1:bf16", "reason": "test failure"}],
            "test_data": "synthetic numbers for tests"}


def test_launch_table_ratios_host_and_selfcheck():
    lines = launch_table(launch_doc()).splitlines()
    assert lines[0].startswith("| problem | primary | objective | evo / primary (GPU) | evo / primary (call)")
    gemm = next(line for line in lines if line.startswith("| gemm 16×4096×4096 bf16"))
    # vs cublas: 0.02/0.01, 0.03/0.02, 0.02/0.01; vs torch.compile: 0.025/0.01, 0.06/0.02, none (not capturable)
    assert "| cublas | call | 2.00× | 1.50× | 2.00× | 2.50× | 3.00× | - | 6 / 40 / 12 | 1.45× (1.50×) |" in gemm
    softmax = next(line for line in lines if line.startswith("| softmax 8192×8192 bf16"))
    assert "| torch_eager | gpu | 2.00× | 2.00× | 2.00× | - | - | - | 8 / - / 9 | failed |" in softmax
    assert lines[-1].startswith("| geomean (2 problems) |") and "**1.73×** (2/2)" in lines[-1]  # sqrt(1.5 * 2)


def test_write_launch_names_the_gpu_and_notes_what_was_not_timed(tmp_path):
    doc = launch_doc()
    json_path, md_path = write_launch(doc, tmp_path / "out")
    assert (json_path, md_path) == launch_paths(doc, tmp_path / "out")
    assert json_path.name == "launch-test-gpu-synthetic.json" and md_path.name == "launch-test-gpu-synthetic.md"
    assert json.loads(json_path.read_text()) == doc
    md = md_path.read_text()
    assert "TEST DATA" in md and "TEST-GPU synthetic" in md
    assert "torch_compile on 8192×8192 bf16: skipped — unavailable: test" in md
    assert "torch_compile on 16×4096×4096 bf16: not capturable in a CUDA graph" in md
    assert "self-check of 8192×8192 bf16: RuntimeError: test" in md and "rmsnorm:1x1:bf16: not measured" in md
    with pytest.raises(ValueError, match="missing"):
        write_launch({"gpu": "x"}, tmp_path)
    assert to_markdown(doc) == md


def test_merge_replaces_problems_measured_again_and_keeps_the_rest():
    from benchmarks.launch_results import merge_launch

    def doc(gpu, keys, wall):  # TEST DATA: made-up documents
        return {"gpu": gpu, "problems": [{"key": k, "v": wall} for k in keys], "failures": [],
                "settings": {"experiments": [f"e{wall}"]}, "wall_s": wall}

    merged = merge_launch(doc("G", ["a", "b"], 1), doc("G", ["b", "c"], 2))
    assert [(p["key"], p["v"]) for p in merged["problems"]] == [("a", 1), ("b", 2), ("c", 2)]
    assert merged["settings"]["experiments"] == ["e1", "e2"] and merged["wall_s"] == 3
    with pytest.raises(ValueError, match="cannot merge"):
        merge_launch(doc("G", [], 1), doc("H", [], 1))


def test_goal_misses_name_each_goal_a_problem_misses():
    from benchmarks.launch_results import goal_misses

    def contender(gpu, call, graph, host):  # TEST DATA
        return {"status": "ok", "median_ms": gpu, "call_ms": call, "graph_ms": graph, "host_us": host}

    good = {"key": "k1", "primary": "cublas", "selfcheck_ratio": 1.0, "header_ratio": 1.02, "dtype": "bf16",
            "contenders": {"cublas": contender(1.0, 1.0, 1.0, 20.0), "evo": contender(0.9, 0.9, 0.9, 10.0)}}
    bad = {"key": "k2", "primary": "cublas", "selfcheck_ratio": 0.8, "header_ratio": 1.0, "dtype": "fp16",
           "contenders": {"cublas": contender(1.0, 1.0, 1.0, 20.0), "evo": contender(0.9, 1.5, 1.2, 30.0)}}
    assert goal_misses({"problems": [good]}) == []
    misses = goal_misses({"problems": [good, bad]})
    assert len(misses) == 4 and all(m.startswith("k2 fp16") for m in misses), misses
