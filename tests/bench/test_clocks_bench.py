"""evo bench's caller clocks without a GPU: contenders measured on stand-in clocks (made-up figures, never a
measurement), the ratios each problem's entry derives from them, and the markdown table of SYNTHETIC TEST
DATA."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evo.bench.command import problem_entry
from evo.bench.measure import ContenderResult, Entrant, measure_contenders
from evo.bench.results import to_markdown
from evo.bench.results_clocks import best_other, clocks_table, not_capturable
from evo.problem import Problem
from tests.bench.test_bench import _contender, _FakeGemm, _problem, _stand_in_timer, synthetic_doc


def _stand_in_clocks(seen: list[int], graph: bool = True):
    """Not a measurement: the i-th function gets call 10(i+1) ms, graph 5(i+1) ms (None if not `graph`), host
    (i+1) µs, after running it once."""

    def clocks(fns):
        seen.append(len(fns))
        for f in fns:
            f()
        return [{"call_ms": 10.0 * (i + 1), "graph_ms": 5.0 * (i + 1) if graph else None, "host_us": i + 1.0}
                for i in range(len(fns))]

    return clocks


def _entrants():
    return [Entrant("ref", lambda prob: (lambda a, b: a @ b)), Entrant("wrong", lambda prob: (lambda a, b: a @ b + 1)),
            Entrant("evo", lambda prob: (lambda a, b: a @ b))]


def test_clocks_measure_only_the_correct_contenders_and_keep_the_gpu_time():
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (8, 8, 8), "fp32")
    seen: list[int] = []
    res = {r.name: r for r in measure_contenders(op, p, _entrants(), timer=_stand_in_timer([]), device="cpu",
                                                 clocks=_stand_in_clocks(seen))}
    assert seen == [2]  # the wrong contender is neither timed nor clocked
    assert (res["ref"].median_ms, res["ref"].call_ms, res["ref"].graph_ms, res["ref"].host_us) == (1.0, 10.0, 5.0, 1.0)
    assert (res["evo"].median_ms, res["evo"].call_ms, res["evo"].graph_ms, res["evo"].host_us) == (2.0, 20.0, 10.0, 2.0)
    assert res["wrong"].call_ms is None and "call_ms" not in res["wrong"].to_json()
    assert res["ref"].to_json()["call_ms"] == 10.0


def test_a_contender_that_cannot_be_captured_says_so_in_json():
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (8, 8, 8), "fp32")
    res = measure_contenders(op, p, _entrants()[:1], timer=_stand_in_timer([]), device="cpu",
                             clocks=_stand_in_clocks([], graph=False))
    out = res[0].to_json()
    assert out["graph_ms"] is None and out["call_ms"] == 10.0  # null: measured, not capturable
    without = measure_contenders(op, p, _entrants()[:1], timer=_stand_in_timer([]), device="cpu")[0].to_json()
    assert "graph_ms" not in without and "call_ms" not in without  # no clocks asked for: nothing said


def test_clocks_that_fail_leave_the_gpu_time_and_a_reason():
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (8, 8, 8), "fp32")

    def broken(fns):
        raise RuntimeError("capture exploded")

    (res,) = measure_contenders(op, p, _entrants()[:1], timer=_stand_in_timer([]), device="cpu", clocks=broken)
    assert res.status == "ok" and res.median_ms == 1.0 and res.call_ms is None
    assert "clocks not measured" in res.reason and "capture exploded" in res.reason


def test_problem_entry_ratios_on_every_clock():
    op = _FakeGemm()
    p = Problem.make("gemm", op.dims, (16, 64, 64), "fp32")
    res = [ContenderResult("cublas", "ok", median_ms=0.02, call_ms=0.03, graph_ms=0.021, host_us=6.0),
           ContenderResult("evo", "ok", median_ms=0.01, call_ms=0.04, graph_ms=None, host_us=20.0)]
    e = problem_entry(op, p, res, primary="cublas", copy_GBps=None, gpu="TEST-GPU")
    evo, cublas = e["contenders"]["evo"], e["contenders"]["cublas"]
    # faster on GPU time, slower per call
    assert evo["ratio"] == pytest.approx(2.0) and evo["call_ratio"] == pytest.approx(0.75)
    assert "graph_ratio" not in evo and evo["graph_ms"] is None and evo["host_us"] == 20.0
    assert cublas["call_ratio"] == 1.0 and cublas["graph_ratio"] == 1.0


def _clocked(median, call, graph, host, ratio=None):
    return _contender(median, ratio=ratio, call_ms=call, graph_ms=graph, host_us=host)


def clocks_doc() -> dict:
    """Synthetic test data: evo fastest on GPU time at 4096³ but slowest per call at 16×4096×4096."""
    big = _problem(4096, 4096, 4096, {"cublas": _clocked(1.0, 1.1, 1.0, 5.0, 1.0),
                                      "torch_compile": _clocked(0.9, 1.0, 0.9, 30.0),
                                      "evo": _clocked(0.5, 0.55, 0.5, 10.0, 2.0)})
    small = _problem(16, 4096, 4096, {"cublas": _clocked(0.02, 0.03, 0.02, 5.0, 1.0),
                                      "torch_compile": _clocked(0.03, 0.024, None, 30.0),
                                      "evo": _clocked(0.01, 0.04, 0.01, 20.0, 2.0)})
    return synthetic_doc(problems=[big, small], contenders=["cublas", "torch_compile", "evo"])


def test_best_other_is_per_clock():
    big, small = clocks_doc()["problems"]
    assert best_other(small, "call_ms") == ("torch_compile", 0.024)
    assert best_other(small, "graph_ms") == ("cublas", 0.02)  # torch.compile has no graph clock here
    assert best_other(big, "median_ms") == ("torch_compile", 0.9)


def test_clocks_table_ratios_and_geomean():
    table = clocks_table(clocks_doc())
    lines = table.splitlines()
    assert lines[0].startswith("| problem | evo call (ms) | evo / cublas (call) | evo / best other (call)")
    big = next(line for line in lines if line.startswith("| 4096×4096×4096"))
    small = next(line for line in lines if line.startswith("| 16×4096×4096"))
    # call clock: 1.1 / 0.55 = 2.00 vs cublas, 1.0 / 0.55 = 1.82 vs torch.compile; graph: 1.0 / 0.5, 0.9 / 0.5
    assert "| 0.55 | 2.00× | 1.82× (torch_compile) | 0.5 | 2.00× | 1.80× (torch_compile) | 5 | 10 |" in big
    # per call evo loses at the small shape (0.03 / 0.04, 0.024 / 0.04) though its GPU time is half cuBLAS's
    assert "| 0.04 | 0.75× | 0.60× (torch_compile) | 0.01 | 2.00× | 2.00× (cublas) | 5 | 20 |" in small
    geo = lines[-1]
    assert geo.startswith("| geomean (2 problems)")
    assert "**1.22×** (2/2)" in geo  # sqrt(2.00 * 0.75)
    assert not_capturable(clocks_doc()) == ["torch_compile on 16×4096×4096 bf16"]


def test_markdown_has_the_clocks_section_only_when_measured():
    md = to_markdown(clocks_doc())
    assert "## The clocks a caller sees" in md and "TEST DATA" in md
    assert "Not capturable in a CUDA graph (no graph clock): torch_compile on 16×4096×4096 bf16." in md
    assert "The clocks a caller sees" not in to_markdown(synthetic_doc())  # GPU time alone: no such table


def test_run_bench_passes_clocks_to_the_final_measurement_only(monkeypatch):
    """run_bench on CPU with stand-ins (numbers are not timings): the clocks measure the contenders that are
    reported, not the finalists' pre-pass nor the copy bandwidth."""
    import evo.bench.command as bench
    from evo.experiment.spec import Experiment

    p = Problem.make("gemm", ("M", "N", "K"), (8, 8, 8), "fp32")
    seen: list[int] = []
    fake = SimpleNamespace(name="gemm", throughput_unit="TFLOP/s", bench_baselines=lambda: [
        SimpleNamespace(name="cublas", make=lambda prob: (lambda a, b: a @ b), doc="")])
    for attr in ("flops", "bytes", "throughput", "make_inputs", "reference", "tolerance"):
        setattr(fake, attr, getattr(_FakeGemm(), attr))
    monkeypatch.setattr("operators.get", lambda name, genome=None: fake)
    doc = bench.run_bench(Experiment(name="t", operator="gemm", problems=(p,)), [p], None, search=False,
                          contenders=["cublas"], device="cpu", timer=_stand_in_timer([]),
                          clocks=_stand_in_clocks(seen), reps=5)
    assert seen == [1] and doc["settings"]["clocks"] is True
    assert doc["problems"][0]["contenders"]["cublas"]["call_ms"] == 10.0
