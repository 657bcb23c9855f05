"""Memory across runs: a second run of an experiment is seeded from the shared results database with the first
run's elites and never measures again a kernel the first one measured (served rows say shared#<id>)."""

from __future__ import annotations

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.experiment.rundir import RunDir
from evo.experiment.spec import MemorySpec
from evo.search.run import run_experiment
from evo.store.shared import ENV_VAR, SharedResults, default_path, is_served
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


class CountingBackend(fx.StandInBackend):
    """The stand-in backend, counting the kernels its workers really evaluate."""

    measured = 0

    def open_worker(self, device_index: int):
        worker = super().open_worker(device_index)
        evaluate = worker.evaluate

        def counted(cand, timeout_s):
            CountingBackend.measured += 1
            return evaluate(cand, timeout_s)

        worker.evaluate = counted
        return worker


def test_default_path(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "x.sqlite"))
    assert default_path() == tmp_path / "x.sqlite" and default_path("~/y.db").name == "y.db"
    monkeypatch.delenv(ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_path() == tmp_path / "evo" / "results.sqlite"


def test_second_run_is_seeded_and_measures_nothing_twice(tmp_path, monkeypatch):
    fx.register(monkeypatch)
    db = tmp_path / "results.sqlite"
    exp = fx.experiment(name="mem", sizes=(512,), evaluations=30, seed=0, memory=MemorySpec(db=str(db), seed=6))

    def run(name):
        CountingBackend.measured = 0
        summary = run_experiment(exp, tmp_path / name, executor=LocalExecutor(CountingBackend()))
        with Store(RunDir(tmp_path / name).store) as store:
            return summary.problems[0], store.evaluations(), CountingBackend.measured

    first, rows1, measured1 = run("one")
    with SharedResults(db) as shared:
        own1 = sum(not is_served(r) for r in rows1)  # measured, or failed to compile (a failure is remembered too)
        assert shared.count() == own1 >= measured1 > 20
    second, rows2, measured2 = run("two")
    seeded = [r for r in rows2 if r.origin == "memory"]
    assert len(seeded) == 6 and all(r.worker.startswith("shared#") for r in seeded)
    # the first run's best kernel is among the seeds, served at once: reached within the seeds, not re-measured
    assert second.best == pytest.approx(first.best) or second.best > first.best
    assert second.best_index is not None and second.best_index <= 6
    first_sources = {r.source_hash for r in rows1 if r.status != "crashed"}
    remeasured = [r for r in rows2 if not is_served(r) and r.source_hash in first_sources]
    assert remeasured == []
    own2 = sum(not is_served(r) for r in rows2)
    assert measured2 <= own2 < len(rows2)
    with SharedResults(db) as shared:  # the second run's own measurements are remembered too
        assert shared.count() == own1 + own2


def test_nearest_elites_prefer_the_nearest_problem_on_the_same_gpu(tmp_path):
    import operators
    from tests.fixtures.search_fixtures import OPERATOR

    fx.register_now()
    op = operators.get(OPERATOR)
    from evo.evaluate.candidate import Candidate

    with SharedResults(tmp_path / "r.sqlite") as shared:
        g = op.family.seeds(op.problem((512,), "fp32"), None)[0]
        for n, ms, gpu in ((512, 2.0, "A"), (4096, 1.0, "A"), (520, 1.0, "B")):
            p = op.problem((n,), "fp32")
            shared.record(Candidate(p, g, op).row("ok", median_ms=ms, baseline_ms=1.0, gpu=gpu))
        found = shared.nearest_elites(op.problem((600,), "fp32"), "A", {}, limit=1)
        assert [Store_key(r) for r in found] == ["evo_test_axpy:512:fp32"]
        assert shared.nearest_elites(op.problem((600,), "fp16"), "A", {}) == []


def Store_key(r):  # noqa: N802 - reads like the attribute it returns
    return r.problem_key
