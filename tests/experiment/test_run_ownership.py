"""A run owns its directory and its Ray instance: a second writer is refused in one line while it runs, `kill -9`
of the driver leaves no Ray process behind, and the directory's lock dies with the run. The run's Ray is its own
even where `ray start` recorded a cluster that no longer exists."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from evo.evaluate.ray_guard import descendants
from evo.experiment.runlock import RunLock

SMOKE = """name: own
operator: gemm
problems: {shapes: [64x64x64], dtypes: [fp16]}
genome: {BLOCK_M: [32, 64], BLOCK_N: [32, 64], BLOCK_K: [32, 64]}
initial_random: 4
budget: {evaluations: 100000, wall_s: 300}
executor: {kind: smoke, compile_workers: 1}
evaluation: {reps: 1, warmup: 0}
"""


def _rows(store: Path) -> int:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            return int(db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])
    except sqlite3.Error:
        return 0


def _alive(procs: dict[int, int]) -> dict[int, int]:
    now = descendants({1})  # every process of this PID namespace but 1 itself
    return {pid: start for pid, start in procs.items() if now.get(pid) == start}


def _evo(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evo.surface.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_kill_9_leaves_no_ray_process_and_no_stuck_lock(tmp_path):
    exp = tmp_path / "own.yaml"
    exp.write_text(SMOKE)
    run = tmp_path / "run"
    ray_tmp = Path(tempfile.mkdtemp(prefix="evo-own-", dir="/tmp"))  # short: Ray's socket paths are bounded
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")  # a cluster `ray start` left behind
    env = dict(os.environ, RAY_TMPDIR=str(ray_tmp))
    driver = subprocess.Popen([sys.executable, "-m", "evo", "run", str(exp), "--out", str(run)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    started: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 180
        while _rows(run / "store.sqlite") < 3:
            assert driver.poll() is None, f"the run ended early: {driver.stderr.read()}"
            assert time.monotonic() < deadline, "no evaluation stored within 180 s"
            time.sleep(0.5)
        started = descendants({driver.pid})
        assert any("raylet" in _cmdline(pid) for pid in started), "the run's Ray instance is not under the driver"

        # one run directory, one writer: a second run or resume is refused in one line, the first keeps going
        for argv in (["run", str(exp), "--out", str(run), "--resume"], ["run", str(exp), "--out", str(run)]):
            second = _evo(*argv)
            assert second.returncode == 2, second.stderr
            assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
        assert "in use by another evo run" in _evo("run", str(exp), "--out", str(run), "--resume").stderr
        # inspection reads alongside the writer
        status = _evo("status", str(run))
        assert status.returncode == 0 and "gemm:64x64x64:fp16" in status.stdout

        rows_before = _rows(run / "store.sqlite")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        deadline = time.monotonic() + 20
        while _alive(started) and time.monotonic() < deadline:
            time.sleep(0.25)
        left = {pid: _cmdline(pid) for pid in _alive(started)}
        assert left == {}, f"processes left after kill -9 of the run: {left}"
        assert _rows(run / "store.sqlite") >= rows_before  # nothing completed is lost
        with RunLock(run):  # the kernel dropped the dead run's lock: a resume may take the directory
            pass
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for pid in _alive(started):  # clean up whatever a failure left, this test's processes only
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return ""
