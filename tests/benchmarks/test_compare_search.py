"""The logic of the GPU comparison script (benchmarks.compare_search) on CPU, with the test stand-in backend:
the grid measures every genome once, MAP-Elites is then served entirely from the store, and the counts
to reach 99% of the grid's best are consistent."""

from __future__ import annotations

import pytest

from benchmarks.compare_search import compare_problem, random_search_counts, table
from evo.evaluate.executor import LocalExecutor
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


def test_random_search_counts():
    assert random_search_counts([1.0, None, 3.0, 2.0], 2.5) == (5 / 2, pytest.approx(2.0, abs=1.0))
    expected, median = random_search_counts([float(v) for v in range(100)], 99.0)
    assert expected == pytest.approx(101 / 2) and 40 <= median <= 60
    assert random_search_counts([None, 1.0], 5.0) == (None, None)


def test_compare_problem_on_the_stand_in(tmp_path, monkeypatch):
    import operators

    fx.register(monkeypatch)
    op = operators.get(fx.OPERATOR)
    problem = op.problem((512,), "fp32")
    with Store(tmp_path / "c.sqlite") as store, LocalExecutor(fx.StandInBackend(), lookup=store.lookup) as ex:
        result = compare_problem(op, problem, store, ex, seeds=[0, 1], budget_fraction=0.5, space={})
        grid = [r for r in store.iter(problem.key) if r.run_id.startswith("grid-")]
    assert result["grid_size"] == len(grid) == len({r.genome_hash for r in grid})
    best = min(fx.stand_in_ms(op.family.from_canonical(r.genome)) for r in grid if r.status == "ok")
    assert result["grid_best"] == pytest.approx(op.throughput(problem, best))
    for m in result["mapelites"]:
        assert m["measured_on_gpu"] == 0 and m["served_from_store"] == m["budget"]
        assert m["evaluations_to_mark"] is not None and 1 <= m["evaluations_to_mark"] <= m["budget"]
        assert m["final_best"] == pytest.approx(result["grid_best"])
    assert "MAP-Elites" in table([result])
