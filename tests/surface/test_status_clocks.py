"""`evo status` and `evo report` show the user's clocks (the elite's per-call and host time) and name the objective
the run was judged by. Rows are made-up TEST DATA."""

from __future__ import annotations

import pytest

import operators
from evo.evaluate.modules import source_hash
from evo.problem import HOPPER
from evo.store.record import Evaluation
from evo.store.sqlite import Store
from evo.surface.report import ReportInput, report_data
from evo.surface.report_html import page
from evo.surface.status import format_status, run_status

OP = operators.get("gemm")
PROBLEM = OP.problem((64, 64, 64), "fp16")


def row(genome, gpu_ms, call_ms, host_us, objective):
    return Evaluation(operator="gemm", problem_key=PROBLEM.key, problem=PROBLEM.to_json(), genome=genome.canonical(),
                      genome_hash=genome.hash, source_hash=source_hash(genome.canonical()), status="ok", gpu="G",
                      versions={"triton": "t"}, median_ms=gpu_ms, baseline_ms=0.04, baseline="torch-test",
                      call_ms=call_ms, baseline_call_ms=0.012, host_us=host_us, baseline_host_us=9.0,
                      objective=objective, worker="test-data")


@pytest.fixture(params=["call", "gpu"], ids=["call_clock", "gpu_clock"])
def store(request, tmp_path):
    a, b = OP.family.seeds(PROBLEM, HOPPER)[:2]
    with Store(tmp_path / "s.sqlite") as s:
        s.add(row(a, 0.010, 0.030, 21.5, request.param))  # quick on the GPU, slow per call
        s.add(row(b, 0.020, 0.015, 12.25, request.param))  # the other way round
        s.set_meta(f"floor:{PROBLEM.key}", {"ms": 0.005})
        yield s, request.param


def test_status_shows_the_elite_s_clocks_and_the_objective(store):
    s, objective = store
    (status,) = run_status(s)
    assert status.objective == objective
    on_call = objective == "call"
    call_ms, host_us, fitness, gpu_ms = (0.015, 12.25, 0.015, 0.020) if on_call else (0.030, 21.5, 0.010, 0.010)
    assert status.call_ms == call_ms and status.host_us == host_us
    # the elite is chosen on the objective's clock, but the speed of light is a floor on GPU time
    assert status.sol_share == pytest.approx(0.005 / gpu_ms)
    assert status.ratio == pytest.approx((0.012 if objective == "call" else 0.04) / fitness)
    table = format_status([status])
    head, _, line = table.splitlines()[:3]  # (a note of a budget cut short may follow)
    assert f"best (objective {objective})" in head and "call" in head and "host" in head
    assert f"{call_ms:.4g} ms" in line and f"{host_us:.3g} us" in line
    smoke = format_status([status], smoke=True)
    assert "objective" not in smoke and f"{host_us:.3g} us" not in smoke  # a smoke run times nothing


def test_the_report_shows_the_clocks_and_names_the_objective(store):
    s, objective = store
    data = report_data(ReportInput(s, "t"))
    p = data["problems"][0]
    top = p["elites"][0]
    assert p["objective"] == objective
    assert (top["call_ms"], top["host_us"]) == ((0.015, 12.2) if objective == "call" else (0.03, 21.5))
    assert top["fitness_ms"] == (top["call_ms"] if objective == "call" else top["median_ms"])
    (over,) = data["overview"]["rows"]
    assert over["ratios"]["torch-test"] == pytest.approx(top["ratio"], rel=1e-2)  # one clock for both ratios
    html = page(data)
    assert "call ms" in html and "host µs" in html and f"Objective {objective}:" in html


def test_status_of_a_store_from_before_the_clocks(tmp_path):
    """Rows without the clocks: judged by GPU time, their clock columns empty."""
    (a,) = OP.family.seeds(PROBLEM, HOPPER)[:1]
    with Store(tmp_path / "s.sqlite") as s:
        s.add(row(a, 0.010, None, None, "gpu"))
        (status,) = run_status(s)
    assert status.objective == "gpu" and status.call_ms is None and status.best is not None
    line = format_status([status]).splitlines()[2]
    assert "  -  " in line
