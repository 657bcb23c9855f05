"""The evaluation store as the evaluator uses it: WAL mode, rows that survive a SIGKILL mid-run, serving a
measurement again, and the pandas frame."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

from evo.problem import Problem
from evo.store.record import Evaluation
from evo.store.sqlite import Store

WRITER = textwrap.dedent("""
    import sys, time
    from evo.store.record import Evaluation
    from evo.store.sqlite import Store
    store = Store(sys.argv[1])
    i = 0
    while True:
        store.add(Evaluation(operator="faulty", problem_key=f"faulty:{i + 1}:fp32",
                             problem=f'{{"operator": "faulty", "shape": [["N", {i + 1}]], "dtype": "fp32"}}',
                             genome="{}", genome_hash="g", source_hash=f"s{i}", status="ok", median_ms=1.0 + i))
        i += 1
        print(i, flush=True)  # printed only after the row was committed
""")


PROBLEM = Problem("faulty", (("N", 1024),), "fp32").to_json()  # rows must name a problem that decodes


def row(source_hash="abc", status="ok", gpu="gpu-a", versions=None, **kw):
    return Evaluation(operator="faulty", problem_key="faulty:1024:fp32", problem=PROBLEM, genome="{}", genome_hash="g",
                      source_hash=source_hash, status=status, gpu=gpu,
                      versions=versions or {"triton": "3.6.0", "torch": "2.11", "cuda": "13.0"}, **kw)


def test_wal_mode(tmp_path):
    with Store(tmp_path / "e.db"):
        pass
    db = sqlite3.connect(tmp_path / "e.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_rows_survive_sigkill_mid_run(tmp_path):
    path = tmp_path / "killed.db"
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env)
    committed = 0
    deadline = time.monotonic() + 60
    while committed < 50 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        committed = int(line)
    os.kill(proc.pid, signal.SIGKILL)  # no chance to close the database
    proc.wait()
    assert committed >= 50, "the writer did not get going"
    with Store(path) as store:
        n = store.count()
        assert n >= committed
        rows = store.evaluations()
        assert [r.source_hash for r in rows] == [f"s{i}" for i in range(n)]  # none lost, none torn
        assert all(r.status == "ok" and r.median_ms == 1.0 + i for i, r in enumerate(rows))


def test_lookup_serves_only_the_same_measurement(tmp_path):
    with Store(tmp_path / "e.db") as store:
        store.add(row(status="error"))  # an `error` is not a property of the kernel: never served
        assert store.lookup("abc", "faulty:1024:fp32", "gpu-a", row().versions) is None
        store.add(row(median_ms=2.0))
        store.add(row(median_ms=3.0))
        hit = store.lookup("abc", "faulty:1024:fp32", "gpu-a", row().versions)
        assert hit is not None and hit.median_ms == 3.0  # the latest
        assert store.lookup("abc", "faulty:1024:fp32", "gpu-b", row().versions) is None
        assert store.lookup("abc", "faulty:1024:fp32", "gpu-a", {"triton": "3.9.0", "torch": "2.11",
                                                                   "cuda": "13.0"}) is None
        assert store.lookup("abd", "faulty:1024:fp32", "gpu-a", row().versions) is None
        frame = store.frame()
        assert list(frame["median_ms"].iloc[1:]) == [2.0, 3.0] and len(frame) == 3
