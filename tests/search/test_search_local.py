"""The search loop with the in-process executor: budgets, store rows, archives rebuilt identically,
transfer, events, reproducibility, resume and Ctrl-C. Fitness comes from the test stand-in backend."""

from __future__ import annotations

import numpy as np
import pytest

from evo.archive import GridArchive
from evo.evaluate.executor import LocalExecutor
from evo.experiment.rundir import RunDir
from evo.experiment.spec import Budget
from evo.search.loop import Search
from evo.search.run import run_experiment
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


@pytest.fixture(autouse=True)
def _operator(monkeypatch):
    fx.register(monkeypatch)


def sequence(store):
    return [(e.problem_key, e.genome_hash, e.origin, tuple(e.parents), e.status) for e in store.iter()]


def test_search_fills_the_store_and_archives_rebuild_identically(tmp_path):
    import operators

    exp = fx.experiment(evaluations=24, mutators={"mutate": 1.0, "crossover_group": 1.0})
    op = operators.get(fx.OPERATOR)
    events = []
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend()) as ex:
        search = Search(exp, op, store, ex, events.append, run_id="t#1")
        summary = search.run()
        for p in exp.problems:
            rows = store.evaluations(p.key)
            assert len(rows) == 24
            assert all(r.run_id == "t#1" and r.gpu == fx.STAND_IN_GPU for r in rows)
            rebuilt = GridArchive.from_store(store, p, op, exp.descriptors, exp.evaluation.noise_margin)
            live = search.archives[p.key]
            assert rebuilt.elites() == live.elites() and len(live) > 3
            assert rebuilt.history.as_dict() == live.history.as_dict()
        first, second = exp.problems
        elites_first = {e.genome_hash for e in search.archives[first.key].elites()}
        transferred = [r for r in store.evaluations(second.key) if r.origin == "transfer"]
        assert transferred and all(r.parents[0] in elites_first for r in transferred)
        children = [r for r in store.evaluations(first.key) if r.origin in ("mutate", "crossover_group")]
        assert children and all(len(r.parents) == (1 if r.origin == "mutate" else 2) for r in children)
    assert [s.reason for s in summary.problems] == ["evaluations", "evaluations"]
    s2 = summary.problems[1]
    assert s2.transferred == len(transferred) and s2.best_index is not None and s2.transfer_saved is not None
    assert summary.problems[0].best == pytest.approx(op.throughput(first, min(fx.stand_in_ms(
        search.family.from_canonical(e.genome)) for e in search.archives[first.key].elites())))
    kinds = [e.kind for e in events]
    assert kinds.count("evaluation") == 48 and kinds.count("problem_start") == 2 and kinds.count("problem_done") == 2
    evals = [e for e in events if e.kind == "evaluation" and e.problem_index == 0]
    assert [e.evaluations for e in evals] == list(range(1, 25))
    assert all(e.budget == 24 and e.total_workers == 1 and e.unit == "GB/s" for e in evals)
    assert evals[-1].best == pytest.approx(summary.problems[0].best)
    assert evals[-1].best_ratio == pytest.approx(summary.problems[0].best_ratio)


def test_seeded_runs_repeat_their_variation_exactly(tmp_path):
    def run(seed, name):
        exp = fx.experiment(name=name, evaluations=20, seed=seed)
        run_experiment(exp, tmp_path / name, executor=LocalExecutor(fx.StandInBackend()))
        with Store(RunDir(tmp_path / name).store) as store:
            return sequence(store)

    a, b, c = run(7, "a"), run(7, "b"), run(8, "c")
    assert a == b and len(a) == 40
    assert a != c


def test_budgets_stagnation_and_wall(tmp_path):
    exp = fx.experiment(name="stag", sizes=(512,), evaluations=200,
                        budget=Budget(evaluations=200, stagnation=6, min_evaluations=0))
    s = run_experiment(exp, tmp_path / "stag", executor=LocalExecutor(fx.StandInBackend()))
    (p,) = s.problems
    assert p.reason == "stagnation" and p.evaluations < 200
    with Store(RunDir(tmp_path / "stag").store) as store:
        import operators

        archive = GridArchive.from_store(store, exp.problems[0], operators.get(fx.OPERATOR))
        assert archive.evaluations - archive.best_index == 6
    exp = fx.experiment(name="wall", sizes=(512,), budget=Budget(evaluations=None, wall_s=0.0, min_evaluations=0))
    s = run_experiment(exp, tmp_path / "wall", executor=LocalExecutor(fx.StandInBackend()))
    assert s.problems[0].reason == "wall_s" and s.problems[0].evaluations == 0
    # the default floor: wall time ends no problem before 24 evaluations (tests/search/test_budget_floor.py)
    exp = fx.experiment(name="wall24", sizes=(512,), budget=Budget(evaluations=None, wall_s=0.0))
    s = run_experiment(exp, tmp_path / "wall24", executor=LocalExecutor(fx.StandInBackend()))
    assert s.problems[0].reason == "wall_s" and s.problems[0].evaluations == 24


def test_resume_continues_deterministically_without_repeating(tmp_path):
    import shutil

    short = fx.experiment(name="r", evaluations=9)
    run_experiment(short, tmp_path / "r", executor=LocalExecutor(fx.StandInBackend()))
    shutil.copytree(tmp_path / "r", tmp_path / "r2")
    with pytest.raises(ValueError, match="already holds a run"):
        run_experiment(short, tmp_path / "r", executor=LocalExecutor(fx.StandInBackend()))
    with pytest.raises(ValueError, match="nothing to resume"):
        run_experiment(short, tmp_path / "none", resume=True, executor=LocalExecutor(fx.StandInBackend()))
    longer = fx.experiment(name="r", evaluations=21)
    seqs = []
    for d in ("r", "r2"):
        s = run_experiment(longer, tmp_path / d, resume=True, executor=LocalExecutor(fx.StandInBackend()))
        assert [p.evaluations for p in s.problems] == [21, 21] and s.session_evaluations == 24
        with Store(RunDir(tmp_path / d).store) as store:
            seq = sequence(store)
            assert store.meta("sessions") == 2
        for key in (p.key for p in longer.problems):
            hashes = [h for k, h, *_ in seq if k == key]
            assert len(hashes) == len(set(hashes)) == 21  # nothing evaluated twice
        seqs.append(seq)
    assert seqs[0] == seqs[1]
    assert RunDir(tmp_path / "r").experiment.read_text() == short.source


def test_each_problem_keeps_its_clock_cpu_time_and_pipeline_occupancy(tmp_path):
    from evo.evaluate.occupancy import Occupancy

    exp = fx.experiment(name="c", evaluations=8)
    run_experiment(exp, tmp_path / "c", executor=LocalExecutor(fx.StandInBackend()))
    with Store(RunDir(tmp_path / "c").store) as store:
        first = {p.key: store.meta(f"cpu_s:{p.key}") for p in exp.problems}
        assert all(store.meta(f"queue:{p.key}") is None for p in exp.problems)  # no stages of its own
    assert all(0 < cpu <= 60 for cpu in first.values())
    ex = LocalExecutor(fx.StandInBackend())
    ex.occupancy = Occupancy()  # as the Ray executor has one
    run_experiment(fx.experiment(name="c", evaluations=12), tmp_path / "c", resume=True, executor=ex)
    with Store(RunDir(tmp_path / "c").store) as store:
        for p in exp.problems:
            assert store.meta(f"cpu_s:{p.key}") > first[p.key]  # both sessions' CPU time
            queue = store.meta(f"queue:{p.key}")
            assert queue["seconds"] <= store.meta(f"wall_s:{p.key}") and queue["waiting"] == {"mean": 0, "max": 0}


class InterruptingBackend(fx.StandInBackend):
    """Raises KeyboardInterrupt (as Ctrl-C would) during its `after`-th evaluation."""

    def __init__(self, after):
        super().__init__()
        self.after = after

    def open_worker(self, device_index):
        worker = super().open_worker(device_index)
        evaluate, count = worker.evaluate, [0]

        def interrupting(ready, timeout_s):
            count[0] += 1
            if count[0] == self.after:
                raise KeyboardInterrupt
            return evaluate(ready, timeout_s)

        worker.evaluate = interrupting
        return worker


def test_ctrl_c_keeps_completed_results_and_resume_finishes(tmp_path):
    exp = fx.experiment(name="int", evaluations=12)
    events = []
    s = run_experiment(exp, tmp_path / "int", on_event=events.append, executor=LocalExecutor(InterruptingBackend(5)))
    assert s.interrupted and [p.reason for p in s.problems] == ["interrupted"]
    assert events[-1].kind == "problem_done" and events[-1].reason == "interrupted"
    with Store(RunDir(tmp_path / "int").store) as store:
        assert store.count() == 4
    s = run_experiment(exp, tmp_path / "int", resume=True, executor=LocalExecutor(fx.StandInBackend()))
    assert not s.interrupted and [p.evaluations for p in s.problems] == [12, 12]


def test_rng_streams_differ_per_problem_and_count(tmp_path):
    import operators

    exp = fx.experiment()
    with Store(tmp_path / "s.sqlite") as store:
        search = Search(exp, operators.get(fx.OPERATOR), store, LocalExecutor(fx.StandInBackend()))
    draws = {(i, s, n): search._rng(i, s, n).integers(1 << 30) for i in (0, 1) for s in (0, 1) for n in (0, 5)}
    assert len(set(draws.values())) == len(draws)
    assert search._rng(1, 1, 5).integers(1 << 30) == draws[(1, 1, 5)]
    assert isinstance(search._rng(0, 0), np.random.Generator)


def test_experiments_sharing_a_store_keep_their_own_archives(tmp_path):
    import operators

    op = operators.get(fx.OPERATOR)
    with Store(tmp_path / "shared.sqlite") as store, LocalExecutor(fx.StandInBackend(), lookup=store.lookup) as ex:
        a = Search(fx.experiment(name="a", sizes=(512,), evaluations=10), op, store, ex)
        a.run()
        b = Search(fx.experiment(name="b", sizes=(512,), evaluations=6, seed=3), op, store, ex)
        b.run()
        rows_b = [r for r in store.iter() if r.run_id == "b#1"]
        assert store.count() == 16 and len(rows_b) == 6
        assert b.archives["evo_test_axpy:512:fp32"].evaluations == 6  # a's rows are not b's history
        served = [r for r in rows_b if r.worker.startswith("store#")]
        assert served  # b's seeds were measured by a: served from the store, not measured again
        with pytest.raises(ValueError, match="run id"):
            Search(fx.experiment(name="c"), op, store, ex, run_id="a#2")


def test_transfer_offers_the_elites_of_the_nearest_shape_first(tmp_path):
    """Elites of a shape near the next problem's come before those of a far one, whatever their ratios: a decode
    GEMM's tiles are no start for a prefill GEMM."""
    import operators

    exp = fx.experiment(name="near", sizes=(64, 4096, 2048), evaluations=12)
    small, large, target = exp.problems
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend()) as ex:
        search = Search(exp, operators.get(fx.OPERATOR), store, ex)
        search.run()
        archives = {p.key: search.archives[p.key] for p in (small, large)}
        ranked = search._transfer_elites(archives, target)
    near = {e.genome_hash for e in archives[large.key].elites()}
    far = {e.genome_hash for e in archives[small.key].elites()}
    only = [e for e in ranked if (e.genome_hash in near) != (e.genome_hash in far)]  # (one genome may be in both)
    order = ["near" if e.genome_hash in near else "far" for e in only]
    assert order and order == sorted(order, key=lambda o: o != "near") and "far" in order
