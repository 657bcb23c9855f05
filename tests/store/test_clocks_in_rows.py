"""A row's clocks and objective: which time is its fitness, its ratio on that clock, and old stores (without the
clock columns) that open and gain them. Every time here is made-up TEST DATA."""

import sqlite3

import pytest

from evo.problem import Problem
from evo.store.record import Evaluation
from evo.store.shared import SharedResults
from evo.store.sqlite import Store


def row(objective="gpu", status="ok", **kw):
    fields = dict(median_ms=2.0, baseline_ms=3.0, call_ms=5.0, baseline_call_ms=4.0, host_us=7.5,
                  baseline_host_us=6.0)
    fields.update(kw)
    return Evaluation(operator="op", problem_key="op:8:fp32", problem=Problem("op", (("N", 8),), "fp32").to_json(),
                      genome="{}", genome_hash="g",
                      source_hash="s", status=status, objective=objective, **fields)


def test_the_fitness_is_the_objective_s_clock():
    gpu, call = row("gpu"), row("call")
    assert gpu.fitness_ms == 2.0 and gpu.baseline_fitness_ms == 3.0 and gpu.ratio == pytest.approx(1.5)
    # on the call clock the same kernel is slower than its baseline: the ratio says so
    assert call.fitness_ms == 5.0 and call.baseline_fitness_ms == 4.0 and call.ratio == pytest.approx(0.8)


def test_a_missing_clock_is_no_fitness_never_the_other_clock():
    ev = row("call", call_ms=None)
    assert ev.fitness_ms is None and ev.ratio is None and ev.median_ms == 2.0
    assert row("call", baseline_call_ms=None).ratio is None
    assert row("gpu", status="wrong").ratio is None


def test_an_unknown_objective_is_refused():
    with pytest.raises(ValueError, match="unknown objective 'wall'"):
        row("wall")
    with pytest.raises(ValueError, match="unknown objective"):
        row().judged_by("cpu")


def test_judged_by_takes_the_objective_only_where_the_row_has_its_clock():
    both = row("gpu")
    assert both.judged_by("call").objective == "call" and both.judged_by("call").fitness_ms == 5.0
    assert both.objective == "gpu"  # a copy: the stored row is not changed
    gpu_only = row("gpu", call_ms=None, baseline_call_ms=None)  # a stand-in worker's row (tests)
    assert gpu_only.judged_by("call").objective == "gpu"
    failed = row("gpu", status="timeout", median_ms=None, call_ms=None)
    assert failed.judged_by("call").objective == "call"


def test_clocks_round_trip_through_the_store(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        store.add(row("call"))
        (back,) = store.evaluations()
    assert (back.call_ms, back.baseline_call_ms, back.host_us, back.baseline_host_us) == (5.0, 4.0, 7.5, 6.0)
    assert back.objective == "call" and back.ratio == pytest.approx(0.8)


_OLD_COLUMNS = ("operator", "problem_key", "problem", "genome", "genome_hash", "source_hash", "status", "reason",
                "gpu", "versions", "versions_key", "median_ms", "baseline_ms", "run_id", "worker")


def _old_store(path):
    """A store as an evo before the call and host clocks made it: no such columns, one correct row."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE evaluations (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                   + ", ".join(f"{c} {'REAL' if c.endswith('_ms') else 'TEXT'}" for c in _OLD_COLUMNS) + ")")
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO evaluations (operator, problem_key, problem, genome, genome_hash, source_hash, status, "
                   "reason, gpu, versions, versions_key, median_ms, baseline_ms, run_id, worker) VALUES "
                   "('op', 'op:8:fp32', '{\"operator\": \"op\", \"shape\": [[\"N\", 8]], \"dtype\": \"fp32\"}', "
                   "'{}', 'g', 's', 'ok', '', 'G', '{}', '{}', 2.0, 3.0, 'r#1', 'w')")
    db.close()


def _columns(path):
    with sqlite3.connect(path) as db:
        names = {r[1] for r in db.execute("PRAGMA table_info(evaluations)")}
    db.close()
    return names


@pytest.mark.parametrize("kind", [Store, SharedResults])
def test_an_old_store_opens_and_gains_the_clock_columns(tmp_path, kind):
    path = tmp_path / "old.sqlite"
    _old_store(path)
    assert "call_ms" not in _columns(path)
    with kind(path) as store:
        (old,) = store.evaluations()
        store.add(row("call"))
        new = store.evaluations()[-1]
    assert {"call_ms", "baseline_call_ms", "host_us", "baseline_host_us", "objective"} <= _columns(path)
    # the old row was judged by GPU time, the only clock there was; its new clocks are None, not ''
    assert old.objective == "gpu" and old.call_ms is None and old.host_us is None
    assert old.fitness_ms == 2.0 and old.ratio == pytest.approx(1.5)
    assert new.objective == "call" and new.call_ms == 5.0


def test_an_old_store_read_only_reads_with_the_defaults(tmp_path):
    path = tmp_path / "old.sqlite"
    _old_store(path)
    with Store(path, readonly=True) as store:
        (old,) = store.evaluations()
    assert old.objective == "gpu" and old.call_ms is None and old.fitness_ms == 2.0
    assert "call_ms" not in _columns(path)  # read-only never changes the store


def test_the_shared_database_ranks_by_each_row_s_fitness(tmp_path):
    """nearest_elites orders by ratio on each row's own clock: under "call" a kernel slower on the GPU but
    quicker per call comes first."""
    from evo.problem import Problem

    problem = Problem("op", (("N", 8),), "fp32")
    with SharedResults(tmp_path / "shared.sqlite") as shared:
        for name, gpu_ms, call_ms in (("gpu-fast", 1.0, 9.0), ("call-fast", 2.0, 3.0)):
            shared.add(Evaluation(operator="op", problem_key=problem.key, problem=problem.to_json(), genome="{}",
                                  genome_hash=name, source_hash=name, status="ok", gpu="G", median_ms=gpu_ms,
                                  baseline_ms=2.0, call_ms=call_ms, baseline_call_ms=6.0, objective="call"))
        found = shared.nearest_elites(problem, "G", {}, limit=2)
    assert [r.genome_hash for r in found] == ["call-fast", "gpu-fast"]
