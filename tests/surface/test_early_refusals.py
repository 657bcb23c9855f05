"""Refusals before any worker starts, and fast (issue 24, item 6): a mistake about genes, descriptors or problem
sizes, a symbolic-link loop as --out and a changed seed on --resume each end in one line and exit 2 with neither
torch, triton nor Ray imported. Each case runs `evo run` in a fresh interpreter (where nothing is imported yet) and
times main() there: < 1 s in-process, and the whole subprocess, Python's start-up included, < 3 s on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import operators
from evo.experiment import limits
from evo.experiment.config import load_experiment
from evo.experiment.resume_check import deciding
from evo.store.sqlite import Store
from tests.fixtures.run_fixture import make_run

SMOKE = Path(__file__).resolve().parents[2] / "experiments" / "smoke.yaml"
HEAVY = ("torch", "triton", "ray")
# main() in a fresh interpreter: its status, stderr, seconds, and which heavy packages it imported
_PROBE = textwrap.dedent("""
    import json, sys, time
    from evo.surface.cli import main
    t = time.perf_counter()
    code = main(sys.argv[1:])
    print(json.dumps([code, time.perf_counter() - t, [m for m in HEAVY if m in sys.modules]]))
""").replace("HEAVY", repr(HEAVY))


def _refused(*argv: str, cwd: Path) -> str:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=cwd,
                          timeout=60)
    wall = time.perf_counter() - start
    code, seconds, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    err = done.stderr.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("evo: error: "), err
    assert heavy == [], f"imported {heavy} before refusing: {err}"
    assert seconds < 1.0, f"main() took {seconds:.2f} s to refuse: {err}"
    assert wall < 3.0, f"the refusal took {wall:.2f} s with Python's start-up"
    return err


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = SMOKE.read_text()
    assert old in text
    path = tmp_path / "variant.yaml"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("BLOCK_M: [16, 32, 64]", "BLOCK_M: [17]", "not in the domain of gene BLOCK_M"),
    ("BLOCK_M: [16, 32, 64]", "BLOCK_Q: [16]", "genome"),
    ("descriptors: [tile_area, block_k]", "descriptors: [nope]", "unknown descriptor for gemm 'nope'"),
    ("shapes: [64x64x64, 32x96x64]", "shapes: [65536x65536x64]", "elements per tensor"),
], ids=["gene-value", "gene-name", "descriptor", "too-large-problem"])
def test_an_invalid_experiment_is_refused_before_torch(tmp_path, old, new, expected):
    err = _refused("run", str(_variant(tmp_path, old, new)), "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert expected in err
    assert not (tmp_path / "run").exists()


def test_a_symlink_loop_as_out_is_refused_before_workers(tmp_path):
    (tmp_path / "loop").symlink_to("loop")
    err = _refused("run", str(SMOKE), "--out", "loop", cwd=tmp_path)
    assert "loops back on itself" in err
    (tmp_path / "dangling").symlink_to("nowhere")
    assert "does not exist" in _refused("run", str(SMOKE), "--out", "dangling", cwd=tmp_path)


def test_a_changed_seed_on_resume_is_refused_before_workers(tmp_path):
    run = make_run(tmp_path / "runs", name="smoke", smoke=True)
    with Store(run / "store.sqlite") as store:  # as evo.search.run records a session's deciding settings
        store.set_meta("deciding", deciding(load_experiment(SMOKE)))
    changed = _variant(tmp_path, "seed: 0", "seed: 1")
    err = _refused("run", str(changed), "--out", str(run), "--resume", cwd=tmp_path)
    assert "seed: 0 -> 1" in err and "--allow-changes" in err


@pytest.mark.parametrize("name", operators.names())
def test_tensor_shapes_are_the_shapes_torch_makes(name):
    """The built-ins' shapes without torch (checked before torch is imported) are those of their meta tensors."""
    op = operators.get(name)
    try:  # distinct sizes catch two dimensions swapped; an operator that relates its dims takes its example
        problem = op.problem(tuple(range(24, 24 + 8 * len(op.dims), 8)), "fp16")
    except ValueError:
        problem = op.problem(op.example, "fp16")
    assert sorted(op.tensor_shapes(problem)) == sorted(limits._meta_shapes(op, problem))


def test_an_operator_without_tensor_shapes_is_checked_on_the_meta_device():
    """A plug-in that declares no shapes is still checked: its inputs are made on torch's meta device."""
    class Huge:
        def tensor_shapes(self, problem):
            return None

        def make_inputs(self, problem, seed, device="cuda"):
            import torch

            return (torch.empty(1 << 16, 1 << 16, device=device),)

        def reference(self, x):
            return x

    problem = operators.get("gemm").problem((8, 8, 8), "fp16")
    assert "65536x65536 tensor" in limits.check_indexable(Huge(), problem)


@pytest.mark.parametrize("how", ["same path", "relative", "symbolic link", "hard link", "environment"])
def test_a_results_database_that_is_the_runs_own_store_is_refused(tmp_path, monkeypatch, how):
    """memory.db naming the run's own store would store every evaluation twice (issue 42, class 4): refused in one
    line before any worker starts, however the path names it."""
    resume = how == "hard link"  # a hard link needs the store to exist: a resume of a run
    run = make_run(tmp_path / "runs", name="smoke", smoke=True) if resume else tmp_path / "runs" / "smoke"
    db = {"same path": run / "store.sqlite", "relative": Path("runs/./smoke/../smoke/store.sqlite"),
          "symbolic link": tmp_path / "link.sqlite", "hard link": tmp_path / "hard.sqlite",
          "environment": run / "store.sqlite"}[how]
    if how == "symbolic link":
        db.symlink_to(run / "store.sqlite")  # (dangling until the run would create the store)
    if resume:
        with Store(run / "store.sqlite") as store:
            store.set_meta("deciding", deciding(load_experiment(SMOKE)))
        db.hardlink_to(run / "store.sqlite")
    text = SMOKE.read_text()
    if how != "environment":
        text += f"memory:\n  db: {db}\n"
    (tmp_path / "exp.yaml").write_text(text)
    before = (run / "store.sqlite").read_bytes() if resume else None
    if how == "environment":
        monkeypatch.setenv("EVO_RESULTS_DB", str(db))
    err = _refused("run", str(tmp_path / "exp.yaml"), "--out", str(run), *(["--resume"] if resume else []),
                   cwd=tmp_path)
    assert "is this run's own store" in err and "stored twice" in err
    if resume:
        assert (run / "store.sqlite").read_bytes() == before
    else:
        assert not run.exists()


def test_run_experiment_refuses_its_own_store_as_memory_too(tmp_path):
    """The same check in evo.search.run, for callers that skip the command line (the Python API, the zoo)."""
    import dataclasses

    from evo.experiment.runlock import RunDirError
    from evo.search.run import run_experiment

    experiment = load_experiment(SMOKE)
    run = tmp_path / "run"
    experiment = dataclasses.replace(experiment, memory=dataclasses.replace(experiment.memory,
                                                                            db=str(run / "store.sqlite")))
    with pytest.raises(RunDirError, match="own store"):
        run_experiment(experiment, run)
    assert not run.exists()
