"""evo bench on a GPU: every GEMM contender checked and timed side by side on a small bf16 problem, and a
whole `run_bench` without a search (evo then reported missing). Run on the GPU machine:
    python3 -m pytest tests/gpu/test_bench_gpu.py -q
(about 2-4 minutes: torch.compile max-autotune and the tutorial autotuner tune once; Helion runs with its
default config here, not its autotuner)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture
def no_helion_autotune(monkeypatch):
    import operators.gemm.baselines as gb

    monkeypatch.setattr(gb, "HELION_EFFORT", "none")


def test_gemm_contenders_side_by_side(no_helion_autotune):
    import operators
    from evo.bench.measure import Entrant, measure_contenders
    from evo.evaluate.timing import time_interleaved
    from operators.gemm.baselines import gemm_contenders

    op = operators.get("gemm")
    p = op.problem((1000, 768, 1024), "bf16")  # ragged M: masks and wrap-around exercised
    entrants = [Entrant(b.name, b.make, b.doc) for b in op.baselines()[:1] + gemm_contenders()]
    res = {r.name: r for r in measure_contenders(op, p, entrants, timer=time_interleaved, device="cuda", reps=20)}
    for name in ("cublas", "triton_tutorial", "torch_compile"):
        assert res[name].status == "ok", f"{name}: {res[name].reason}"
        assert 0 < res[name].median_ms < 5 and res[name].max_rel_error < op.tolerance(p)
    helion = res["helion"]
    assert helion.status == "ok" or "helion is not importable" in helion.reason, helion.reason


def test_run_bench_without_search_writes_a_report(tmp_path):
    import json

    import operators
    from evo.bench.command import run_bench
    from evo.bench.results import write_report
    from evo.experiment.spec import Experiment

    op = operators.get("gemm")
    problems = [op.problem((16, 1024, 1024), "bf16"), op.problem((1024, 1024, 1024), "bf16")]
    exp = Experiment(name="gpu_test", operator="gemm", problems=tuple(problems))
    doc = run_bench(exp, problems, None, search=False, contenders=["cublas", "triton_tutorial", "evo"], reps=20,
                    finalists=1)
    assert doc["copy_GBps"] > 500 and len(doc["problems"]) == 2, doc.get("failures")
    small, big = doc["problems"]
    assert small["memory_bound"] is True and big["memory_bound"] is False
    assert small["contenders"]["cublas"]["status"] == "ok" and small["contenders"]["cublas"]["ratio"] == 1.0
    assert small["contenders"]["evo"]["status"] == "missing"
    json_path, md_path = write_report(doc, tmp_path)
    assert json.loads(json_path.read_text())["gpu"] == doc["gpu"] and "geomean" in md_path.read_text()
