"""`evo export` (and the API and zoo through it) writes the kernel source the run measured, as its store kept it, even
after the renderer changed; a store from before sources were kept exports the genome rendered again and says so."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

import operators
from evo.evaluate import LocalExecutor, SmokeBackend
from evo.experiment.rundir import RunDir
from evo.experiment.spec import Budget, ExecutorSpec, Experiment
from evo.problem import HOPPER
from evo.search.run import run_experiment
from evo.store.sources import source_hash
from evo.store.sqlite import Store
from evo.surface.cli import main
from evo.surface.export import NO_SOURCE, export_all, export_one
from operators.gemm.operator import GemmOperator
from tests.fixtures.run_fixture import make_run

GENES = {"BLOCK_M": [32], "BLOCK_N": [32, 64], "BLOCK_K": [32], "split_k": [1], "num_stages": [2],
         "persistent": [False], "memory": ["pointer"], "warp_specialize": [False]}
CHANGED = "raise RuntimeError('the renderer changed since the run')\n"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """A CPU smoke run of a restricted GEMM (3 evaluations through the smoke backend: compiled for sm_90, checked
    in the interpreter; the fitness is a stand-in, not a timing)."""
    op = operators.get("gemm", GENES)
    exp = Experiment(name="smoke", operator="gemm", problems=(op.problem((64, 64, 64), "fp16"),), genome=GENES,
                     budget=Budget(evaluations=3), initial_random=2, executor=ExecutorSpec(kind="smoke"),
                     source="name: smoke\n")
    rd = RunDir.of(tmp_path_factory.mktemp("runs"), "smoke")
    summary = run_experiment(exp, rd.path, executor=LocalExecutor(SmokeBackend(exp.evaluation, exp.seed),
                                                                  exp.evaluation))
    assert summary.problems[0].evaluations == 3
    return rd.path


def _changed_renderer(monkeypatch):
    monkeypatch.setattr(GemmOperator, "render", lambda self, genome, problem, target: CHANGED)


@pytest.mark.slow
def test_the_run_keeps_every_measured_kernels_source(smoke_run):
    op = operators.get("gemm")
    with Store(RunDir(smoke_run).store, readonly=True) as store:
        rows = store.evaluations()
        assert rows and {r.status for r in rows} == {"ok"}
        for r in rows:
            kept = store.source(r.source_hash)
            assert kept is not None and source_hash(kept) == r.source_hash
            genome = op.family.from_canonical(r.genome)
            assert kept == op.render(genome, op.problem((64, 64, 64), "fp16"), HOPPER)


@pytest.mark.slow
def test_export_writes_the_stored_source_after_the_renderer_changed(smoke_run, tmp_path, monkeypatch, capsys):
    with Store(RunDir(smoke_run).store, readonly=True) as store:
        elite = export_one(store, (64, 64, 64))[1]
        kept = store.source(elite.evaluation.source_hash)
    _changed_renderer(monkeypatch)
    out = tmp_path / "k.py"
    assert main(["export", str(smoke_run), "--shape", "64x64x64", "-o", str(out)]) == 0
    text = out.read_text()
    assert kept.split("import torch", 1)[1].strip("\n") in text and CHANGED not in text and NO_SOURCE not in text
    assert "keeps no source" not in capsys.readouterr().out
    with Store(RunDir(smoke_run).store, readonly=True) as store:
        module = export_all(store)[0]
    assert CHANGED not in module and repr(kept.split("\n")[-2]) in module


@pytest.mark.slow
def test_the_api_loads_the_stored_source(smoke_run, monkeypatch):
    import evo.api

    _changed_renderer(monkeypatch)  # a module of the renderer's text would raise when imported
    assert callable(evo.api.load(smoke_run, "64x64x64"))


def _without_sources(run: Path, copy: Path) -> Path:
    """A copy of `run` as an evo from before sources were kept would have left it."""
    shutil.copytree(run, copy)
    db = sqlite3.connect(RunDir(copy).store)
    db.execute("DROP TABLE sources")
    db.commit()
    db.close()
    return copy


@pytest.mark.slow
def test_a_store_without_sources_exports_the_genome_rendered_again_saying_so(smoke_run, tmp_path, capsys):
    old = _without_sources(smoke_run, tmp_path / "old")
    out = tmp_path / "k.py"
    assert main(["export", str(old), "--shape", "64x64x64", "-o", str(out)]) == 0
    stdout = capsys.readouterr().out
    assert [line for line in stdout.splitlines() if "keeps no source" in line] == [
        "note: the run's store keeps no source of the kernel (stored by an older evo): rendered again from the genome, "
        "as the NOTE in the module's header says"]
    assert f"# NOTE: {NO_SOURCE}: the code below is its genome rendered again." in out.read_text()
    with Store(RunDir(old).store, readonly=True) as store:
        assert not store.keeps_sources  # exporting never writes the store


def test_an_older_gpu_store_says_whether_the_genome_renders_the_source_measured(tmp_path, monkeypatch, capsys):
    run = make_run(tmp_path, n_random=2)  # rows stored without sources (TEST DATA, made-up timings)
    with Store(RunDir(run).store, readonly=True) as store:
        text = export_one(store, (64, 64, 64))[0]
        assert f"NOTE: {NO_SOURCE}: the code below is its genome rendered again, which gives the source measured " \
               "(the same hash)." in text
        _changed_renderer(monkeypatch)
        text = export_one(store, (64, 64, 64))[0]
    assert "which gives a source different from the one measured (the renderer changed since the run)." in text
    assert CHANGED.strip() in text
