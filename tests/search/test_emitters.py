"""Emitters and the bandit scheduler: credit shifts the proposals, settings are validated, the store records
which emitter proposed each evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from evo.evaluate.executor import LocalExecutor
from evo.experiment.spec import EmitterSpec
from evo.search import emitters
from evo.search.emitters import BanditScheduler
from evo.search.loop import Search
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


def _arms(n: int) -> list:
    return [emitters.get(name) for name in ("variation", "guided", "exploit", "restart")[:n]]


def test_bandit_shifts_proposals_to_the_emitter_that_improves():
    rng = np.random.default_rng(0)
    sched = BanditScheduler(_arms(3), floor=0.0)
    for _ in range(300):
        i = sched.choose(rng)
        sched.credit(i, improved=(i == 2 and rng.random() < 0.6) or (i != 2 and rng.random() < 0.05))
    shares = sched.shares()
    assert shares["exploit"] > 0.6 and min(shares.values()) > 0.0
    assert sched.arms[2].improvements > sched.arms[0].improvements
    assert all(a.pending == 0 for a in sched.arms)


def test_bandit_follows_a_change_and_keeps_a_floor():
    rng = np.random.default_rng(1)
    sched = BanditScheduler(_arms(2), floor=0.05, discount=0.95)
    chosen = []
    for step in range(400):
        i = sched.choose(rng)
        chosen.append(i)
        good = 0 if step < 200 else 1  # what works changes half-way
        sched.credit(i, improved=(i == good and rng.random() < 0.5))
    assert chosen[100:200].count(0) > 70  # first the arm that works
    assert chosen[300:].count(1) > 70  # then, discounted credit forgets, the other one
    assert chosen[300:].count(0) >= 1  # and the floor keeps the old arm alive


def test_in_flight_proposals_count_as_pulls():
    rng = np.random.default_rng(0)
    sched = BanditScheduler(_arms(4), floor=0.0)
    first = [sched.choose(rng) for _ in range(4)]
    assert sorted(first) == [0, 1, 2, 3]  # async: every arm is tried before any result is back


@pytest.mark.parametrize("bad", [{"pool": 1}, {"explore": 1.5}, {"nope": 3}])
def test_bad_emitter_settings_fail(bad):
    with pytest.raises(ValueError, match="guided"):
        emitters.get("guided", bad)
    with pytest.raises(ValueError, match="unknown emitter"):
        emitters.get("nope")


def test_store_records_the_emitter_and_every_emitter_proposes(tmp_path, monkeypatch):
    import operators

    fx.register(monkeypatch)
    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), evaluations=40)
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend(), lookup=store.lookup) as ex:
        summary = Search(exp, op, store, ex, run_id="t#1").run()
        rows = store.evaluations()
    by = {}
    for r in rows:
        by[r.emitter] = by.get(r.emitter, 0) + 1
    assert set(by) == {"initial", "variation", "guided", "exploit", "restart"}
    assert all(r.origin in ("seed", "random", "transfer") for r in rows if r.emitter == "initial")
    assert all(r.origin == "random" for r in rows if r.emitter == "restart")
    counts = summary.problems[0].emitters
    assert sum(c["proposed"] for c in counts.values()) == 40 - by["initial"]


def test_experiment_with_one_emitter_uses_only_it(tmp_path, monkeypatch):
    import operators

    fx.register(monkeypatch)
    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), evaluations=20, emitters=(EmitterSpec("restart"),))
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend()) as ex:
        Search(exp, op, store, ex, run_id="t#1").run()
        assert {r.emitter for r in store.iter()} == {"initial", "restart"}


def test_old_store_gains_the_emitter_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE evaluations (id INTEGER PRIMARY KEY AUTOINCREMENT, operator TEXT, problem_key TEXT, "
               "problem TEXT, genome TEXT, genome_hash TEXT, source_hash TEXT, status TEXT, reason TEXT, gpu TEXT, "
               "versions TEXT, versions_key TEXT, median_ms REAL, spread_ms REAL, times_ms TEXT, baseline TEXT, "
               "baseline_ms REAL, baseline_spread_ms REAL, max_rel_error REAL, resources TEXT, compile_s REAL, "
               "origin TEXT, parents TEXT, run_id TEXT, worker TEXT, started_at REAL, finished_at REAL)")
    db.execute("INSERT INTO evaluations (operator, problem_key, problem, genome, genome_hash, source_hash, status) "
               "VALUES ('gemm', 'gemm:64x64x64:fp16', "
               "'{\"operator\": \"gemm\", \"shape\": [[\"M\", 64], [\"N\", 64], [\"K\", 64]], \"dtype\": \"fp16\"}', "
               "'{}', 'g', 's', 'ok')")
    db.commit()
    db.close()
    with Store(path) as store:
        (row,) = store.evaluations()
        assert row.emitter == ""


class _CountingSurrogate:
    """Stands in for the surrogate: counts fits and reports the rows it was fitted on."""

    def __init__(self, family, **settings):
        self.family, self.fits, self.rows_seen = family, 0, 0

    def fit(self, rows):
        self.fits += 1
        self.rows_seen = len(rows)
        return True


def test_guided_refits_every_few_proposals_then_as_the_rows_grow_by_a_tenth():
    from types import SimpleNamespace

    family = object()
    rows: list[int] = []
    ctx = SimpleNamespace(variation=SimpleNamespace(family=family), rows=lambda: rows, seed=0)
    guided = emitters.get("guided", {"refit_every": 8, "fit_lag": 0})  # refits in place
    guided.surrogate = _CountingSurrogate(family)
    guided._since_fit = guided.refit_every
    for _ in range(80):  # few rows: a refit every 8 proposals
        guided._refit(ctx)
        rows.append(0)
    assert guided.surrogate.fits == 10
    rows.extend([0] * 1920)  # 2,000 rows: a refit once about 200 more proposals were made
    fits = guided.surrogate.fits
    for _ in range(400):
        guided._refit(ctx)
        rows.append(0)
    assert guided.surrogate.fits - fits == 2


def test_guided_refits_in_a_thread_and_swaps_in_the_new_model_a_fixed_number_of_proposals_later(monkeypatch):
    import threading
    from types import SimpleNamespace

    from evo.search.emitters import guided as guided_module

    gate = threading.Event()

    class Slow(_CountingSurrogate):
        def fit(self, rows):
            assert threading.current_thread().name == "evo-surrogate-fit" and gate.wait(10)
            return super().fit(rows)

    monkeypatch.setattr(guided_module, "Surrogate", Slow)
    family = object()
    rows = [0] * 20
    ctx = SimpleNamespace(variation=SimpleNamespace(family=family), rows=lambda: list(rows), seed=0)
    guided = emitters.get("guided", {"refit_every": 8, "fit_lag": 3})
    guided._refit(ctx)  # the first fit begins; the proposals go on with an untrained surrogate
    untrained = guided.surrogate
    rows.extend([0] * 5)
    guided._refit(ctx)
    guided._refit(ctx)
    assert guided.surrogate is untrained and untrained.fits == 0  # the fit still waits on the gate
    gate.set()
    guided._refit(ctx)  # the third proposal after it began: waits for the fit, then uses it
    assert guided.surrogate is not untrained and guided.surrogate.fits == 1
    assert guided.surrogate.rows_seen == 20  # the rows as they were when the refit began
    with pytest.raises(ValueError, match="fit_lag"):
        emitters.get("guided", {"fit_lag": -1})
