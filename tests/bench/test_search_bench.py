"""`evo bench-search` on CPU with the test stand-in backend (its fitness is NOT a GPU timing, and the files say
so): every method runs, the marks are consistent, the re-run with the shared database is served, files are
written with one chart per problem."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

from evo.bench import search_bench
from evo.bench.search_bench import METHODS, bench_search, method_experiment
from evo.bench.search_results import reach, write_search_report
from evo.evaluate.executor import LocalExecutor
from tests.fixtures import search_fixtures as fx


def test_reach():
    points = [[0.1, 1, 5.0], [0.5, 4, 9.0], [2.0, 9, 10.0]]
    assert reach(points, 9.0) == (0.5, 4) and reach(points, 10.0) == (2.0, 9) and reach(points, 11.0) == (None, None)


def test_method_experiments(tmp_path):
    exp = fx.experiment(sizes=(512,))
    problem = exp.problems[0]
    names = {m: {e.name for e in method_experiment(exp, m, problem, tmp_path / "m.sqlite").emitters} for m in METHODS}
    assert "guided" in names["evo"] and "guided" not in names["evo-no-surrogate"] and names["random"] == {"restart"}
    assert names["evo-classic"] == {"variation"}
    rnd = method_experiment(exp, "random", problem, tmp_path / "m.sqlite")
    assert not rnd.seeds and not rnd.memory.enabled and not rnd.transfer
    assert method_experiment(exp, "evo-rerun", problem, tmp_path / "m.sqlite").memory.db == str(tmp_path / "m.sqlite")


def test_bench_search_on_the_stand_in(tmp_path, monkeypatch):
    fx.register(monkeypatch)
    exp = fx.experiment(name="bs", sizes=(512,), evaluations=24)
    with LocalExecutor(fx.StandInBackend()) as ex:
        doc = bench_search(exp, list(exp.problems), list(METHODS), work_dir=tmp_path / "work", executor=ex)
    assert doc["smoke"] and "NOT a GPU timing" in doc["note"] and doc["gpu"] == fx.STAND_IN_GPU
    assert doc["warm_up"]["shared"]["evaluations"] >= 2  # an untimed search first (starts the executor's processes)
    assert doc["compile_caches"] == "shared"
    for p in doc["problems"]:
        m = p["methods"]
        assert set(m) == set(METHODS) and p["alternatives"] == {} and "GPU" in p["alternatives_note"]
        assert p["best"] == max(v["best"] for v in m.values())
        assert all(v["evaluations"] == 24 for v in m.values())
        winner = [v for v in m.values() if v["best"] == p["best"]][0]
        assert winner["evaluations_to_mark"] is not None and winner["seconds_to_mark"] is not None
        assert m["evo"]["served"] == 0 and m["random"]["served"] == 0
        assert m["evo-rerun"]["served"] >= 8  # seeded from evo's run and served, not measured again
        _, evaluations = reach(m["evo-rerun"]["trace"], m["evo"]["best"])
        assert evaluations is not None and evaluations <= 8  # evo's best again within its remembered elites
    paths = write_search_report(doc, tmp_path / "out")
    assert [p.name for p in paths] == [f"search-{n}" for n in ("test-stand-in-not-a-gpu-not-a-timing.json",
                                                               "test-stand-in-not-a-gpu-not-a-timing.md",
                                                               "test-stand-in-not-a-gpu-not-a-timing.html")]
    md = paths[1].read_text()
    assert "NOT GPU TIMINGS" in md and md.count("## ") == 1 and "Helion (asked for at effort 'full') was not run" in md
    page = paths[2].read_text()
    assert page.count("best kernel against wall seconds") == 1 and "NOT GPU TIMINGS" in page
    assert json.loads(paths[0].read_text())["problems"][0]["key"] == doc["problems"][0]["key"]


def test_each_method_gets_an_executor_and_a_compile_cache_of_its_own(tmp_path, monkeypatch):
    """Without an executor given, every method starts one of its own whose Triton cache is its own, warms it up
    untimed and shuts it down before the next: no method finds kernels another compiled (the last GPU run let the
    first method pay every cold compile)."""
    import evo.evaluate as evaluate
    from evo.bench.search_results import search_markdown

    fx.register(monkeypatch)
    made = []

    class Recorded(LocalExecutor):
        def start(self):
            made[-1]["started"] = True
            super().start()

        def shutdown(self):
            made[-1]["shut"] = True
            super().shutdown()

    def make(spec, evaluation, seed=0, lookup=None, cache_dir=None):
        made.append({"cache_dir": cache_dir})
        return Recorded(fx.StandInBackend())

    monkeypatch.setattr(evaluate, "make_executor", make)
    exp = fx.experiment(name="pm", sizes=(512, 256), evaluations=10)
    methods = ["random", "evo", "evo-rerun"]
    doc = bench_search(exp, list(exp.problems), methods, work_dir=tmp_path / "w")
    assert [m["cache_dir"] for m in made] == [str(tmp_path / "w" / "triton-cache" / m) for m in methods]
    assert all(m.get("started") and m.get("shut") for m in made)
    assert set(doc["warm_up"]) == set(methods) and doc["compile_caches"] == "per method"
    assert all(set(p["methods"]) == set(methods) for p in doc["problems"])
    assert doc["problems"][0]["methods"]["evo-rerun"]["served"] >= 1  # evo's database, for each problem
    assert "cache of its own" in search_markdown(doc)


def test_helion_cut_off_is_said_in_the_report():
    from evo.bench.search_results import search_markdown

    doc = _doc(["a"], "t0", helion={"effort": "full", "budget_s": 120})
    assert "CUT OFF after 120 s" in search_markdown(doc)
    assert "not run" in search_markdown(_doc(["a"], "t0", helion={"effort": None, "budget_s": None}))


def test_goals_are_said_in_words_with_what_the_issue_asks():
    """The report states each goal as a sentence with its target; a method that never reached Helion's speed says
    so instead of printing a number."""
    from evo.bench.search_results import search_markdown

    def method(trace, to_mark):
        return {"trace": trace, "evaluations": 10, "wall_s": 30.0, "best": trace[-1][2], "served": 0,
                "evaluations_to_mark": to_mark, "seconds_to_mark": 5.0}

    doc = _doc(["a"], "t0")
    doc["problems"][0].update(best=500.0, methods={
        "evo": method([[1.0, 1, 200.0], [5.0, 24, 500.0]], 24),
        "evo-no-surrogate": method([[1.0, 1, 200.0], [20.0, 96, 500.0]], 96)})
    doc["problems"][0]["alternatives"] = {"helion_full": {"status": "ok", "throughput": 400.0, "setup_s": 250.0},
                                          "evo": {"status": "ok", "throughput": 500.0}}
    md = search_markdown(doc)
    assert "evaluations to the mark without the surrogate over with it: 4x (goal: >= 2x)" in md
    assert "Helion-full's side-by-side speed in 2.0% of Helion's tuning time (goal: <= 50%)" in md
    doc["problems"][0]["alternatives"]["helion_full"]["throughput"] = 600.0
    assert "evo's search did not reach Helion-full's side-by-side speed" in search_markdown(doc)


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from evo.surface.cli import main

    assert main(["bench-search", str(tmp_path / "nope.yaml")]) == 2
    assert main(["bench-search", "experiments/smoke.yaml", "--methods", "evo,teleport"]) == 2
    assert main(["bench-search", "experiments/smoke.yaml", "--problems", "9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 3 and "teleport" in err and "Traceback" not in err


def _doc(keys, created, **kw):
    base = {"kind": "search-bench", "operator": "gemm", "gpu": "NVIDIA H100", "smoke": False, "experiment": "b",
            "methods": ["evo", "random"], "mark": 0.99, "budget": {"evaluations": 10}, "versions": {"triton": "3"},
            "note": "test data", "unit": "TFLOP/s", "created": created,
            "problems": [{"key": k, "shape": k, "dtype": "fp16", "best": 1.0, "methods": {}, "alternatives": {},
                          "alternatives_note": "", "from": created} for k in keys]}
    return {**base, **kw}


def test_merged_reports_keep_old_problems_and_take_new_ones():
    from evo.bench.search_results import merge_search_docs

    merged = merge_search_docs(_doc(["a", "b"], "t1"), _doc(["b", "c"], "t2"))
    assert [(p["key"], p["from"]) for p in merged["problems"]] == [("a", "t1"), ("b", "t2"), ("c", "t2")]
    assert merged["runs"] == ["t1", "t2"] and merged["created"] == "t2"
    again = merge_search_docs(merged, _doc(["d"], "t3"))
    assert again["runs"] == ["t1", "t2", "t3"] and [p["key"] for p in again["problems"]] == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="gpu, versions"):
        merge_search_docs(_doc(["a"], "t1"), _doc(["b"], "t2", gpu="NVIDIA H200", versions={"triton": "4"}))


def test_merge_that_does_not_fit_keeps_the_run_beside_the_report(tmp_path, monkeypatch, capsys):
    from evo.bench import search_bench
    from evo.bench.search_results import write_search_report
    from evo.surface.cli import main

    write_search_report(_doc(["a"], "t1", versions={"triton": "old"}), tmp_path)
    monkeypatch.setattr(search_bench, "bench_search", lambda *a, **kw: _doc(["b"], "t2"))
    exp = tmp_path / "b.yaml"
    exp.write_text("operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\nexecutor: {kind: smoke}\n")
    assert main(["bench-search", str(exp), "--merge", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "versions differ" in err and "unmerged" in err
    kept = json.loads((tmp_path / "unmerged" / "search-nvidia-h100.json").read_text())
    assert [p["key"] for p in kept["problems"]] == ["b"]
    assert [p["key"] for p in json.loads((tmp_path / "search-nvidia-h100.json").read_text())["problems"]] == ["a"]


@pytest.mark.parametrize("broken", ["not json", "a directory"])
def test_merge_into_a_report_that_cannot_be_read_keeps_the_run(broken, tmp_path, monkeypatch, capsys):
    from evo.bench import search_bench
    from evo.surface.cli import main

    there = tmp_path / "search-nvidia-h100.json"
    there.mkdir() if broken == "a directory" else there.write_text("{not json")
    monkeypatch.setattr(search_bench, "bench_search", lambda *a, **kw: _doc(["b"], "t2"))
    exp = tmp_path / "b.yaml"
    exp.write_text("operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\nexecutor: {kind: smoke}\n")
    assert main(["bench-search", str(exp), "--merge", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unmerged" in err
    assert (tmp_path / "unmerged" / "search-nvidia-h100.json").exists()


def test_without_plotly_the_page_still_draws_every_problem(monkeypatch):
    """The GPU machine has no plotly: the page falls back to an SVG chart per problem, alternatives as stars."""
    from evo.bench.search_results import search_html

    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly... raises ImportError
    doc = _doc(["a", "b"], "t1")
    doc["problems"][0]["methods"] = {"evo": {"trace": [[0.5, 1, 100.0], [2.0, 7, 300.0]], "wall_s": 12.0},
                                     "random": {"trace": [], "wall_s": 12.0}}
    doc["problems"][0]["alternatives"] = {"helion_full": {"throughput": 280.0, "setup_s": 240.0},
                                          "evo": {"throughput": 299.0, "setup_s": 0.5}}
    page = search_html(doc)
    assert page.count("best kernel against wall seconds") == 2 and page.count("<svg") == 2
    assert "helion_full (tuning time)" in page and "evo (tuning time)" not in page and "240 s" in page


def _fake_gpu(monkeypatch, seen):
    """The GPU path of bench_search on CPU: CUDA said present, the side-by-side timing replaced by a recorder of
    the cache variables it ran under (no GPU is touched)."""
    import torch

    from evo.bench import search_bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    def alternatives(operator, problem, elites, target, helion, budget, device, seed, reps):
        seen.append({name: os.environ.get(name) for name in search_bench.CACHE_VARIABLES})
        return {"helion_full": {"status": "ok", "setup_s": 300.0, "throughput": 1.0, "median_ms": 1.0}}

    monkeypatch.setattr(search_bench, "_alternatives", alternatives)


def test_report_is_written_after_the_searches_and_after_each_problems_alternatives(tmp_path, monkeypatch):
    """A long Helion tuning can outlast the GPU machine's time: the searches are on disk before it starts, marked
    partial with the alternatives pending, and each problem's alternatives as soon as they are timed, each under
    fresh Triton, Inductor and Helion caches (the variables restored after)."""
    from evo.bench.search_results import search_markdown

    fx.register(monkeypatch)
    seen: list[dict] = []
    _fake_gpu(monkeypatch, seen)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/else")
    monkeypatch.delenv("HELION_CACHE_DIR", raising=False)
    cleared: list[int] = []  # Inductor's in-process caches, cleared as its directory changes
    inductor = types.SimpleNamespace(clear_caches=lambda: cleared.append(1))
    monkeypatch.setitem(sys.modules, "torch._inductor.utils", inductor)
    written = []

    def checkpoint(doc):
        written.append((doc["partial"], [p["alternatives_note"] for p in doc["problems"]], search_markdown(doc)))

    exp = fx.experiment(name="cp", sizes=(512, 256), evaluations=6)
    with LocalExecutor(fx.StandInBackend()) as ex:
        doc = bench_search(exp, list(exp.problems), ["evo", "evo-no-surrogate"], work_dir=tmp_path / "w",
                           executor=ex, checkpoint=checkpoint)
    assert [(partial, notes) for partial, notes, _ in written] == [
        (True, [search_bench.PENDING, search_bench.PENDING]), (True, ["", search_bench.PENDING]), (False, ["", ""])]
    assert "PARTIAL" in written[0][2] and "pending" in written[0][2] and "PARTIAL" not in written[-1][2]
    assert "caches of their own" in written[-1][2] and doc["alternatives_caches"].startswith("fresh per problem")
    assert "Helion ran at effort 'full' to the end of its search" in written[-1][2]
    assert [s["TRITON_CACHE_DIR"] for s in seen] == [str(tmp_path / "w" / "alternatives" / i / "triton") for i in "01"]
    assert all(s["HELION_CACHE_DIR"] and s["TORCHINDUCTOR_CACHE_DIR"] and os.path.isdir(s["HELION_CACHE_DIR"])
               for s in seen)
    assert os.environ["TRITON_CACHE_DIR"] == "/somewhere/else" and "HELION_CACHE_DIR" not in os.environ
    assert doc["problems"][1]["alternatives"]["helion_full"]["setup_s"] == 300.0 and len(cleared) == 2


def test_merge_checkpoints_merge_into_the_report_held_before_the_run(tmp_path, monkeypatch):
    """With --merge every checkpoint merges into the report that was there before the run, read once: the final
    report holds the old problems and this run's, and its runs list this run once."""
    from evo.surface.cli import main

    write_search_report(_doc(["a"], "t1"), tmp_path)

    def run(*args, checkpoint=None, **kw):
        doc = _doc(["b"], "t2", partial=True)
        checkpoint(doc)
        checkpoint(dict(doc, partial=False))
        return dict(doc, partial=False)

    monkeypatch.setattr(search_bench, "bench_search", run)
    exp = tmp_path / "b.yaml"
    exp.write_text("operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\nexecutor: {kind: smoke}\n")
    assert main(["bench-search", str(exp), "--merge", "--out", str(tmp_path)]) == 0
    merged = json.loads((tmp_path / "search-nvidia-h100.json").read_text())
    assert [p["key"] for p in merged["problems"]] == ["a", "b"] and merged["runs"] == ["t1", "t2"]
    assert not merged["partial"]


def test_the_helion_benchmark_command_line_parses_and_loads(monkeypatch):
    """The GPU command for issue 25 (README, experiments/bench_search_helion.yaml): its experiment loads, its
    problems are a 3000^3-class square then an LLM projection, and its arguments reach bench_search as meant:
    Helion at its default effort, full, not cut short."""
    from evo.experiment.config import load_experiment
    from evo.surface.cli import main

    exp = load_experiment("experiments/bench_search_helion.yaml")
    assert [p.key for p in exp.problems] == ["gemm:2760x2760x2760:bf16", "gemm:4096x6144x4096:bf16"]
    assert exp.executor.kind == "ray" and exp.budget.wall_s <= 60 and not exp.memory.enabled
    got = {}

    def run(exp, problems, methods, **kw):
        got.update(kw, problems=[p.key for p in problems], methods=methods)
        return _doc([p.key for p in problems], "t")

    monkeypatch.setattr(search_bench, "bench_search", run)
    monkeypatch.setattr(search_bench, "write_search_report", lambda doc, out: [])
    assert main(["bench-search", "experiments/bench_search_helion.yaml", "--problems", "1", "--methods",
                 "evo,evo-no-surrogate", "--helion", "full", "--out", "/nonexistent/out"]) == 0
    assert got["problems"] == ["gemm:2760x2760x2760:bf16"] and got["methods"] == ["evo", "evo-no-surrogate"]
    assert got["helion"] == "full" and got["helion_budget_s"] is None and got["checkpoint"] is not None
