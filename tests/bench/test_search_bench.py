"""`evo bench-search` on CPU with the test stand-in backend (its fitness is NOT a GPU timing, and the files say
so): every method runs, the marks are consistent, the re-run with the shared database is served, files are
written with one chart per problem."""

from __future__ import annotations

import json

import pytest

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
    assert "NOT GPU TIMINGS" in md and md.count("## ") == 1 and "Helion ran at effort 'full' to the end" in md
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
