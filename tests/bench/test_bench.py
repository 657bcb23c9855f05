"""evo bench without a GPU: the JSON/markdown writers and merging on SYNTHETIC TEST DATA (made-up numbers,
never a measurement), contender checking and skipping with a stand-in timer on CPU tensors, elite ranking
from a store, problem selection and the multi-GPU plumbing."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from evo.bench.command import bench_main, evo_entrant, problem_entry, select_problems
from evo.bench.measure import ContenderResult, Entrant, measure_contenders, search_summary
from evo.bench.results import geomean, gpu_slug, load_report, merge_reports, to_markdown, write_report
from evo.experiment.rundir import STORE_NAME
from evo.experiment.spec import Experiment
from evo.problem import HOPPER, Problem
from evo.store.record import Evaluation
from evo.store.sqlite import Store

TEST_GPU = "TEST-GPU synthetic data"


def _contender(median_ms: float | None, status: str = "ok", ratio: float | None = None, **extra):
    c = {"status": status, **extra}
    if status == "ok":
        c.update(median_ms=median_ms, spread_ms=median_ms * 0.01, tflops=1.0 / median_ms)
        if ratio is not None:
            c["ratio"] = ratio
    return c


def _problem(m: int, n: int, k: int, contenders: dict, memory_bound: bool = False) -> dict:
    return {"key": f"gemm:{m}x{n}x{k}:bf16", "M": m, "N": n, "K": k, "dtype": "bf16", "dims": ["M", "N", "K"],
            "flops": 2 * m * n * k, "bytes": 2 * (m * k + k * n + m * n), "intensity": 1.0,
            "memory_bound": memory_bound, "floor_ms": 0.008 if memory_bound else None, "contenders": contenders,
            "evo_genome": {"BLOCK_M": 128}, "evaluations": 10, "search_s": 12.0}


def synthetic_doc(gpu: str = TEST_GPU, problems: list | None = None, **over) -> dict:
    """A benchmark document of made-up numbers (test data, not a measurement)."""
    if problems is None:
        problems = [
            _problem(4096, 4096, 4096, {"cublas": _contender(1.0, ratio=1.0), "triton_tutorial":
                                        _contender(2.0, ratio=0.5, setup_s=12.34), "evo": _contender(0.5, ratio=2.0)}),
            _problem(16, 4096, 4096, {"cublas": _contender(0.02, ratio=1.0, copy_fraction=0.4),
                                      "triton_tutorial": _contender(None, status="wrong", reason="relative error 1"),
                                      "evo": _contender(0.04, ratio=0.5, copy_fraction=0.2)}, memory_bound=True),
        ]
    doc = {"schema": 1, "operator": "gemm", "gpu": gpu, "versions": {"torch": "test", "triton": "test"},
           "primary": "cublas", "throughput_unit": "TFLOP/s", "copy_GBps": 1000.0,
           "contenders": ["cublas", "triton_tutorial", "evo"], "problems": problems, "failures": [],
           "test_data": "synthetic numbers for tests"}
    doc.update(over)
    return doc


# -- writers and merge ----------------------------------------------------------------------------------
def test_gpu_slug_and_geomean():
    assert gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([4.0, 1.0]) == pytest.approx(2.0)
    assert geomean([]) is None


def test_write_report_names_the_gpu_and_round_trips(tmp_path):
    doc = synthetic_doc()
    json_path, md_path = write_report(doc, tmp_path)
    assert json_path.name == "gemm-test-gpu-synthetic-data.json" and md_path.name.endswith(".md")
    back = load_report(json_path)
    assert back == json.loads(json.dumps(doc))
    assert TEST_GPU in md_path.read_text()


def test_markdown_ratios_geomean_roofline_and_reasons():
    md = to_markdown(synthetic_doc())
    assert "TEST DATA" in md
    geo = next(line for line in md.splitlines() if line.startswith("| geomean vs cublas"))
    assert "**1.00×** (2/2)" in geo  # evo: 2.0 and 0.5
    assert "**0.50×** (1/2)" in geo  # the tutorial was wrong on one problem: one ratio only
    assert "(2.00×)" in md and "(0.50×)" in md
    assert "## Memory-bound problems" in md
    roof = md.split("## Memory-bound problems")[1]
    assert "40%" in roof and "20%" in roof and "16×4096×4096 bf16" in roof
    assert "triton_tutorial on 16×4096×4096 bf16: wrong — relative error 1" in md
    setup = md.split("## Set-up cost")[1].split("##")[0]
    assert "| 4096×4096×4096 bf16 | 12.3 | 12 |" in setup and "| 16×4096×4096 bf16 | - | 12 |" in setup


def test_markdown_without_memory_bound_problems_has_no_roofline():
    doc = synthetic_doc()
    doc["problems"] = doc["problems"][:1]
    assert "Memory-bound" not in to_markdown(doc)


def test_merge_keeps_order_and_takes_later_measurement():
    a = synthetic_doc()
    newer = _problem(4096, 4096, 4096, {"cublas": _contender(1.0, ratio=1.0), "evo": _contender(0.25, ratio=4.0)})
    third = _problem(8192, 8192, 8192, {"cublas": _contender(8.0, ratio=1.0)})
    b = synthetic_doc(problems=[third, newer], versions={"torch": "other", "triton": "test"})
    merged = merge_reports([a, b], names=["a.json", "b.json"])
    keys = [p["key"] for p in merged["problems"]]
    assert keys == ["gemm:4096x4096x4096:bf16", "gemm:16x4096x4096:bf16", "gemm:8192x8192x8192:bf16"]
    assert merged["problems"][0]["contenders"]["evo"]["ratio"] == 4.0
    assert merged["versions_differ"] is True
    assert merged["merged_from"][1]["problems"] == ["gemm:8192x8192x8192:bf16", "gemm:4096x4096x4096:bf16"]


def test_merge_refuses_different_gpus_and_schemas():
    with pytest.raises(ValueError, match="gpu"):
        merge_reports([synthetic_doc(), synthetic_doc(gpu="TEST-GPU other")])
    with pytest.raises(ValueError, match="schema"):
        merge_reports([synthetic_doc(), synthetic_doc(schema=99)])
    with pytest.raises(ValueError, match="nothing"):
        merge_reports([])


def test_cli_merge_writes_one_file(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(synthetic_doc(problems=synthetic_doc()["problems"][:1])))
    b.write_text(json.dumps(synthetic_doc(problems=synthetic_doc()["problems"][1:])))
    assert bench_main(["--merge", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    merged = load_report(tmp_path / "out" / "gemm-test-gpu-synthetic-data.json")
    assert len(merged["problems"]) == 2
    assert "geomean vs cublas" in capsys.readouterr().out


def test_cli_merge_onto_a_fifo_is_one_line(tmp_path, capsys):
    import os

    a = tmp_path / "a.json"
    a.write_text(json.dumps(synthetic_doc()))
    (tmp_path / "out").mkdir()
    fifo = tmp_path / "out" / "gemm-test-gpu-synthetic-data.json"
    os.mkfifo(fifo)
    assert bench_main(["--merge", str(a), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "FIFO" in err and str(fifo) in err
    assert fifo.is_fifo()


def test_cli_needs_an_experiment(capsys):
    assert bench_main([]) == 2
    assert "experiment" in capsys.readouterr().err


# -- one problem's entry ------------------------------------------------------------------------------------
class _FakeGemm:
    """Just what problem_entry and measure_contenders read (a CPU matmul; fp32)."""

    name, throughput_unit, dims = "gemm", "TFLOP/s", ("M", "N", "K")

    def flops(self, p):
        return 2 * p.dims["M"] * p.dims["N"] * p.dims["K"]

    def bytes(self, p):
        d = p.dims
        return 4 * (d["M"] * d["K"] + d["K"] * d["N"] + d["M"] * d["N"])

    def throughput(self, p, ms):
        return self.flops(p) / (ms * 1e-3) / 1e12

    def make_inputs(self, p, seed, device="cpu"):
        g = torch.Generator().manual_seed(seed)
        d = p.dims
        return torch.randn(d["M"], d["K"], generator=g), torch.randn(d["K"], d["N"], generator=g)

    def reference(self, a, b):
        return a.double() @ b.double()

    def tolerance(self, p):
        return 1e-5


def test_problem_entry_ratio_throughput_and_memory_bound():
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (16, 4096, 4096), "fp32")
    res = [ContenderResult("cublas", "ok", median_ms=0.02), ContenderResult("evo", "ok", median_ms=0.01),
           ContenderResult("helion", "skipped", reason="unavailable: no helion")]
    e = problem_entry(op, p, res, primary="cublas", copy_GBps=3000.0, gpu="NVIDIA H100 80GB HBM3")
    assert (e["M"], e["N"], e["K"], e["dtype"]) == (16, 4096, 4096, "fp32")
    assert e["contenders"]["evo"]["ratio"] == pytest.approx(2.0)
    assert e["contenders"]["evo"]["tflops"] == pytest.approx(op.throughput(p, 0.01), rel=1e-3)
    floor_ms = op.bytes(p) / 3000e9 * 1e3
    assert e["contenders"]["cublas"]["copy_fraction"] == pytest.approx(floor_ms / 0.02, rel=1e-3)
    assert e["memory_bound"] is True  # ~8 FLOP/byte against a ridge of 67e12 / 3e12 ~ 22
    assert "ratio" not in e["contenders"]["helion"] and e["contenders"]["helion"]["status"] == "skipped"
    big = Problem.make("gemm", op.dims, (4096, 4096, 4096), "fp32")
    assert problem_entry(op, big, res[:1], primary="cublas", copy_GBps=3000.0,
                         gpu="NVIDIA H100 80GB HBM3")["memory_bound"] is False
    assert problem_entry(op, p, res[:1], primary="cublas", copy_GBps=3000.0, gpu="unknown")["memory_bound"] is False


# -- checking and skipping contenders (CPU tensors, stand-in timer) --------------------------------------
def _stand_in_timer(calls):
    """Not a measurement: gives each function a made-up time (1, 2, 3 ... ms) after running it once."""

    def timer(fns, **kw):
        calls.append(len(fns))
        for f in fns:
            f()
        return [SimpleNamespace(median_ms=float(i + 1), spread_ms=0.0, times_ms=[float(i + 1)] * 5)
                for i in range(len(fns))]

    return timer


def _raise(exc):
    def f(*a, **k):
        raise exc

    return f


def test_measure_checks_before_timing_and_records_why():
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (8, 8, 8), "fp32")
    entrants = [
        Entrant("ref", lambda prob: (lambda a, b: a @ b)),
        Entrant("wrong", lambda prob: (lambda a, b: a @ b + 1)),
        Entrant("nan", lambda prob: (lambda a, b: torch.full((8, 8), float("nan")))),
        Entrant("absent", _raise(ImportError("no module named fancy"))),
        Entrant("broken", lambda prob: _raise(RuntimeError("launch failed"))),
    ]
    calls: list[int] = []
    res = {r.name: r for r in measure_contenders(op, p, entrants, timer=_stand_in_timer(calls), device="cpu")}
    assert calls == [1]  # only the correct contender was timed
    assert res["ref"].status == "ok" and res["ref"].median_ms == 1.0 and res["ref"].setup_s is not None
    assert res["wrong"].status == "wrong" and "not timed" in res["wrong"].reason and res["wrong"].median_ms is None
    assert res["nan"].status == "wrong" and "non-finite" in res["nan"].reason
    assert res["absent"].status == "skipped" and "no module named fancy" in res["absent"].reason
    assert res["broken"].status == "skipped" and "launch failed" in res["broken"].reason
    assert all(r.fn is None for r in res.values())


def test_measure_poisons_reused_outputs():
    """A contender that returns stale memory on its second call must not pass the check."""
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (8, 8, 8), "fp32")
    kept = {}

    def lazy(a, b):  # computes once, then hands back the same (freed and refilled) buffer
        if "c" not in kept:
            kept["c"] = a @ b
        return kept["c"]

    res = measure_contenders(op, p, [Entrant("lazy", lambda prob: lazy)], timer=_stand_in_timer([]), device="cpu")
    assert res[0].status == "wrong"


def test_helion_is_skipped_with_reason_when_absent(monkeypatch):
    from operators.gemm.baselines import ContenderUnavailable, gemm_contenders

    monkeypatch.setitem(sys.modules, "helion", None)  # import helion -> ImportError
    monkeypatch.delitem(sys.modules, "operators.gemm.helion_baseline", raising=False)
    helion = next(b for b in gemm_contenders() if b.name == "helion")
    p = Problem.make("gemm", ("M", "N", "K"), (8, 8, 8), "fp32")
    with pytest.raises(ContenderUnavailable, match="helion is not importable"):
        helion.make(p)
    res = measure_contenders(_FakeGemm(), p, [Entrant("cublas", lambda prob: (lambda a, b: a @ b)),
                                              Entrant(helion.name, helion.make, helion.doc)],
                             timer=_stand_in_timer([]), device="cpu")
    assert res[1].status == "skipped" and "helion is not importable" in res[1].reason
    assert res[0].status == "ok"


# -- elites from a store ------------------------------------------------------------------------------------
def _problem_json(key):  # rows name a problem that decodes to their key (evo.store.row_check)
    _, shape, dtype = key.split(":")
    return json.dumps({"operator": "gemm", "shape": [[d, int(s)] for d, s in zip("MNK", shape.split("x"), strict=True)],
                       "dtype": dtype})


def _ev(key, source, status="ok", ms=1.0, base=1.0, gpu="G", t0=0.0, t1=1.0):
    return Evaluation("gemm", key, _problem_json(key), '{"family":"gemm","genes":{}}', "h" + source, source, status,
                      gpu=gpu, median_ms=ms if status == "ok" else None, baseline_ms=base if status == "ok" else None,
                      started_at=t0, finished_at=t1)


def test_search_summary(tmp_path):
    key = "gemm:8x8x8:fp16"
    with Store(tmp_path / "store.sqlite") as store:
        store.add(_ev(key, "a", ms=1.0, base=1.0, t0=100.0, t1=101.0))
        store.add(_ev(key, "b", ms=2.0, base=3.0, t0=101.0, t1=102.0))
        store.add(_ev(key, "b", ms=2.1, base=3.0, t0=102.0, t1=103.0))
        store.add(_ev(key, "c", ms=0.1, base=1.0, gpu="other", t0=103.0, t1=104.0))
        store.add(_ev(key, "d", status="wrong", t0=104.0, t1=130.0))
        store.add(_ev("gemm:16x16x16:fp16", "e"))
        s = search_summary(store, key)
        assert s == {"evaluations": 5, "evaluations_ok": 4, "search_s": 30.0}
        assert search_summary(store, "gemm:1x1x1:fp16")["evaluations"] == 0


def test_finalists_are_the_best_few_and_every_elite_within_the_noise_band():
    """Elites the search timed within 5% of the best are re-timed side by side with the best few (search timings
    that close are noise apart), at most three times as many; --finalists 1 asks for no re-timing."""
    from evo.bench.entrants import finalist_pool

    key = "gemm:8x8x8:fp16"
    elites = [_ev(key, str(i), ms=ms) for i, ms in enumerate((1.0, 1.5, 1.01, 1.04, 1.06, 1.02))]
    assert [e.source_hash for e in finalist_pool(elites, 2)] == ["0", "1", "2", "3", "5"]
    assert [e.source_hash for e in finalist_pool(elites, 3)] == ["0", "1", "2", "3", "5"]
    assert len(finalist_pool(elites * 3, 2)) == 6  # at most 3 x 2
    assert [e.source_hash for e in finalist_pool(elites, 1)] == ["0"] and finalist_pool([], 3) == []


def test_evo_entrant_renders_the_stored_genome_again():
    import operators
    from evo.evaluate.modules import source_hash

    op = operators.get("gemm")
    p = op.problem((32, 32, 32), "fp16")
    genome = op.family.repair(op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, num_warps=4)),
                              p, HOPPER, __import__("numpy").random.default_rng(0))
    src = op.render(genome, p, HOPPER)
    ev = _ev(p.key, source_hash(src))
    ev.genome = genome.canonical()
    entrant, differs = evo_entrant(op, ev, p, HOPPER)
    assert differs is False
    a, b = op.make_inputs(p, 0, "cpu")
    out = entrant.make(p)(a, b)
    ref = op.reference(a, b)
    assert float((out.float() - ref).norm() / ref.norm()) < op.tolerance(p)
    ev.source_hash = "not-the-same"
    assert evo_entrant(op, ev, p, HOPPER)[1] is True
    ev.genome = '{"family":"gemm","genes":{"BLOCK_M":3}}'
    broken, _ = evo_entrant(op, ev, p, HOPPER)
    with pytest.raises(Exception, match="missing genes"):
        broken.make(p)


# -- choosing problems, GPUs, children -----------------------------------------------------------------------
def _experiment():
    probs = tuple(Problem.make("gemm", ("M", "N", "K"), s, d) for s, d in
                  [((16, 16, 16), "fp16"), ((32, 32, 32), "fp16"), ((32, 32, 32), "fp32"), ((64, 64, 64), "fp16")])
    return Experiment(name="t", operator="gemm", problems=probs)


def test_select_problems_by_position_shape_and_key():
    exp = _experiment()
    keys = lambda ps: [p.key for p in ps]  # noqa: E731
    assert keys(select_problems(exp, None)) == keys(exp.problems)
    assert keys(select_problems(exp, ["2-3"])) == ["gemm:32x32x32:fp16", "gemm:32x32x32:fp32"]
    assert keys(select_problems(exp, ["32x32x32", "4", "gemm:32x32x32:fp16"])) == \
        ["gemm:32x32x32:fp16", "gemm:32x32x32:fp32", "gemm:64x64x64:fp16"]
    assert keys(select_problems(exp, ["1,4"])) == ["gemm:16x16x16:fp16", "gemm:64x64x64:fp16"]
    with pytest.raises(ValueError, match="outside"):
        select_problems(exp, ["5"])
    with pytest.raises(ValueError, match="no problem"):
        select_problems(exp, ["8x8x8"])


def test_math_sanity_of_test_data():
    # the synthetic document's ratios are what its times say (so the assertions above check real arithmetic)
    p = synthetic_doc()["problems"][0]["contenders"]
    assert math.isclose(p["cublas"]["median_ms"] / p["evo"]["median_ms"], p["evo"]["ratio"])


def test_run_bench_on_cpu_from_a_stored_run(tmp_path):
    """The whole path on CPU tensors (interpreter, stand-in timer: the numbers are not timings): elites from
    the store, a finalist pass on other inputs, then evo beside the primary baseline."""
    import numpy as np

    import operators
    from evo.bench.command import run_bench
    from evo.evaluate.modules import source_hash
    from evo.experiment.rundir import STORE_NAME

    op = operators.get("gemm")
    p = op.problem((32, 32, 32), "fp16")
    rng = np.random.default_rng(0)
    genomes = [op.family.repair(op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=bk)), p, HOPPER, rng)
               for bk in (16, 32)]
    with Store(tmp_path / STORE_NAME) as store:
        for g, ms in zip(genomes, (2.0, 1.0), strict=True):
            ev = _ev(p.key, source_hash(op.render(g, p, HOPPER)), ms=ms, gpu="cpu (not a GPU)")
            ev.genome, ev.problem = g.canonical(), p.to_json()
            store.add(ev)
    calls: list[int] = []
    exp = Experiment(name="t", operator="gemm", problems=(p,))
    doc = run_bench(exp, [p], tmp_path, search=False, contenders=["cublas", "evo"], device="cpu",
                    timer=_stand_in_timer(calls), reps=5)
    assert calls == [1, 2, 2]  # copy bandwidth; finalists; cublas beside evo
    (entry,) = doc["problems"]
    assert doc["gpu"] == "cpu (not a GPU)" and doc["primary"] == "cublas" and doc["contenders"][-1] == "evo"
    assert entry["contenders"]["evo"]["status"] == "ok" and entry["contenders"]["evo"]["ratio"] == 0.5
    # the stand-in timer ranks the first finalist (the search's best: genome 1) fastest
    assert entry["evo_genome"] == genomes[1].as_dict() and len(entry["evo_finalists"]) == 2
    assert entry["evaluations"] == 2 and "evo_note" not in entry


def test_cli_merge_refuses_mixed_gpus(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(synthetic_doc()))
    b.write_text(json.dumps(synthetic_doc(gpu="TEST-GPU other")))
    assert bench_main(["--merge", str(a), str(b), "--out", str(tmp_path)]) == 2
    assert "cannot merge" in capsys.readouterr().err


def test_cli_flow_applies_overrides_and_writes_the_report(tmp_path, monkeypatch, capsys):
    """bench_main end to end with run_bench replaced by a stand-in returning synthetic test data."""
    import evo.bench.command as bench

    seen = {}

    def fake_run_bench(experiment, problems, run_dir, **kw):
        seen.update(experiment=experiment, problems=problems, run_dir=run_dir, **kw)
        return synthetic_doc()

    monkeypatch.setattr(bench, "run_bench", fake_run_bench)
    monkeypatch.setattr(bench, "_cuda_visible", lambda: True)  # the stand-in needs no GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU slots: everything in this process
    out = tmp_path / "out"
    yaml_path = str(Path(__file__).resolve().parents[2] / "experiments" / "bench_gemm_llm.yaml")
    rc = bench_main([yaml_path, "--problems", "6-7", "--wall-s", "30", "--out", str(out),
                     "--search-dir", str(tmp_path / "run"), "--contenders", "cublas,evo", "--finalists", "2"])
    assert rc == 0
    assert [p.shape_text for p in seen["problems"]] == ["16x4096x4096", "16x28672x4096"]
    from evo.experiment.config import load_experiment

    shipped = load_experiment(yaml_path).budget
    assert shipped.wall_s != 30.0  # so the override is visible
    assert seen["experiment"].budget.wall_s == 30.0 and seen["experiment"].budget.evaluations == shipped.evaluations
    assert seen["search"] is True and seen["run_dir"] == tmp_path / "run" and seen["finalists"] == 2
    assert seen["contenders"] == ["cublas", "evo"]
    assert (out / "gemm-test-gpu-synthetic-data.json").exists() and (out / "gemm-test-gpu-synthetic-data.md").exists()
    assert bench_main([yaml_path, "--run", str(tmp_path / "nothing")]) == 2
    assert "holds no run" in capsys.readouterr().err


def test_contenders_are_checked_and_a_search_always_times_evo(tmp_path, monkeypatch, capsys):
    """A misspelt contender is one line naming the known ones; a run that searches times evo even when
    --contenders leaves it out (a GPU bench once searched 35 s per shape and timed no evo kernel)."""
    import evo.bench.command as bench

    seen = {}
    monkeypatch.setattr(bench, "run_bench", lambda experiment, problems, run_dir, **kw: seen.update(kw) or
                        synthetic_doc())
    monkeypatch.setattr(bench, "_cuda_visible", lambda: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    yaml_path = str(Path(__file__).resolve().parents[2] / "experiments" / "bench_gemm_llm.yaml")
    common = [yaml_path, "--problems", "6", "--out", str(tmp_path / "out"), "--search-dir", str(tmp_path / "run")]
    assert bench_main(common + ["--contenders", "cublas,torch_compile"]) == 0
    assert seen["contenders"] == ["cublas", "torch_compile", "evo"] and "evo added" in capsys.readouterr().err
    assert bench_main(common + ["--contenders", "cublas,cublass"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cublass" in err and "torch_compile" in err
    (tmp_path / "run2").mkdir()
    (tmp_path / "run2" / STORE_NAME).write_bytes(b"")
    seen.clear()
    assert bench_main([yaml_path, "--problems", "6", "--out", str(tmp_path / "out"), "--run", str(tmp_path / "run2"),
                       "--contenders", "cublas"]) == 0
    assert seen["contenders"] == ["cublas"]  # no search: the baselines alone, as asked


def test_bench_without_a_gpu_is_one_line(capsys, monkeypatch):
    import evo.bench.command as bench

    monkeypatch.setattr(bench, "_cuda_visible", lambda: False)
    yaml_path = str(Path(__file__).resolve().parents[2] / "experiments" / "bench_gemm_llm.yaml")
    assert bench_main([yaml_path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA GPU" in err
