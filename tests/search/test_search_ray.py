"""The search on a real, embedded Ray instance (2 CPUs), started once for the file (it costs seconds):
first with the test stand-in backend on two CPU workers, then a CPU smoke run of a restricted GEMM through
the same Ray: render in the driver, compile for sm_90 in Ray tasks, check in evo.evaluate.smoke's interpreter worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from evo.archive import GridArchive
from evo.evaluate import make_executor
from evo.evaluate.ray_executor import RayExecutor
from evo.experiment.rundir import RunDir
from evo.experiment.spec import Budget, ExecutorSpec, Experiment
from evo.search.loop import Search
from evo.search.run import run_experiment
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_search_on_ray(tmp_path, monkeypatch):
    pytest.importorskip("ray")
    import ray

    import operators

    fx.register(monkeypatch)
    monkeypatch.chdir(REPO)  # Ray workers import the test backend from the driver's working directory
    exp = fx.experiment(name="ray", evaluations=14, kind="smoke")
    op = operators.get(fx.OPERATOR)
    events = []
    ex = RayExecutor(fx.StandInBackend(delay_s=0.15), ExecutorSpec(kind="smoke", gpus=2, compile_workers=2),
                     exp.evaluation, num_cpus=2)
    try:
        with Store(tmp_path / "s.sqlite") as store:
            ex.lookup = store.lookup
            ex.start()
            assert ray.util.get_node_ip_address() == "127.0.0.1"
            assert ex.workers == 2 and ex.slots == 8  # two calls per worker, one more compiled each, two ahead
            search = Search(exp, op, store, ex, events.append)
            summary = search.run()
            for p in exp.problems:
                rows = store.evaluations(p.key)
                assert len(rows) == 14 and len({r.genome_hash for r in rows}) == 14
                assert len({r.worker for r in rows if r.status == "ok"}) == 2  # both workers took jobs
                rebuilt = GridArchive.from_store(store, p, op, exp.descriptors, exp.evaluation.noise_margin)
                assert rebuilt.elites() == search.archives[p.key].elites()
                queue = store.meta(f"queue:{p.key}")  # how full the pipeline's stages were, per problem
                assert queue["at_workers"]["max"] == 4 and queue["compiling"]["max"] <= 2
                assert 0 < queue["at_workers"]["mean"] <= 4 and store.meta(f"cpu_s:{p.key}") > 0
        assert [s.evaluations for s in summary.problems] == [14, 14]
        assert max(e.busy_workers for e in events) == 2  # both workers busy at once
        assert all(e.total_workers == 2 for e in events)
        smoke_run(tmp_path)  # while this executor's Ray is up: the smoke executor uses it as it is
    finally:
        ex.shutdown()
    assert not ray.is_initialized()  # the executor that started Ray stopped it


def smoke_run(tmp_path):
    genome = {"BLOCK_M": [32, 64], "BLOCK_N": [32, 64], "BLOCK_K": [32, 64], "split_k": [1], "num_stages": [2, 3],
              "persistent": [False], "memory": ["pointer"], "warp_specialize": [False]}
    import operators

    op = operators.get("gemm", genome)
    exp = Experiment(name="smoke", operator="gemm", problems=(op.problem((64, 64, 64), "fp16"),), genome=genome,
                     budget=Budget(evaluations=6), initial_random=2, executor=ExecutorSpec(kind="smoke"),
                     source="name: smoke\n")
    rd = RunDir.of(tmp_path, "smoke")
    summary = run_experiment(exp, rd.path, executor=make_executor(exp.executor, exp.evaluation, exp.seed))
    assert summary.smoke and summary.problems[0].evaluations == 6
    with Store(rd.store) as store:
        rows = store.evaluations()
    assert len(rows) == 6 and all(r.gpu == "cpu-interpreter" for r in rows)
    ok = [r for r in rows if r.status == "ok"]
    assert ok and all("not a timing" in r.reason for r in ok)
    assert all(r.resources.get("shared", 0) > 0 for r in ok)  # compiled ahead for sm_90 on a CPU
    assert rd.experiment.read_text() == "name: smoke\n"
