"""Kill -9 of a search driver mid-run, then resume: nothing completed is lost, the archive rebuilt from the
store is the one the killed process had, and the resumed run continues to the budget."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evo.archive import GridArchive
from evo.evaluate.executor import LocalExecutor
from evo.experiment.rundir import RunDir
from evo.search.run import run_experiment
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx

REPO = Path(__file__).resolve().parents[2]


def rows(store_path):
    with Store(store_path) as store:
        return store.evaluations()


@pytest.mark.slow
def test_kill_minus_nine_then_resume(tmp_path, monkeypatch):
    import operators

    fx.register(monkeypatch)
    run_dir, log = tmp_path / "kill", tmp_path / "live.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "tests.fixtures.search_driver", str(run_dir), str(log)], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store_path = RunDir(run_dir).store
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:  # kill it in the second problem, mid-search
            if log.exists() and len(log.read_text().splitlines()) >= 13:
                break
            if proc.poll() is not None:
                pytest.fail(f"driver exited early: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        else:
            pytest.fail("driver made no progress")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    before = rows(store_path)
    live = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert 13 <= len(live) <= len(before) < 20  # every evaluation reported live was already stored
    exp = fx.experiment(name="kill", evaluations=10)
    op = operators.get(fx.OPERATOR)
    with Store(store_path) as store:
        for p in exp.problems:
            rebuilt = GridArchive.from_store(store, p, op, exp.descriptors, exp.evaluation.noise_margin)
            for point in (x for x in live if x["problem"] == p.key):
                i = point["n"] - 1
                assert (rebuilt.history.best[i], rebuilt.history.qd_score[i], rebuilt.history.coverage[i]) == \
                    (point["best"], point["qd_score"], point["coverage"])

    summary = run_experiment(exp, run_dir, resume=True, executor=LocalExecutor(fx.StandInBackend()))
    assert [p.evaluations for p in summary.problems] == [10, 10]
    assert summary.session_evaluations == 20 - len(before)
    after = rows(store_path)
    assert [e.to_row() for e in after[:len(before)]] == [e.to_row() for e in before]  # untouched
    for p in exp.problems:
        hashes = [e.genome_hash for e in after if e.problem_key == p.key]
        assert len(hashes) == len(set(hashes)) == 10
