"""`evo run` at Ray's edges ends in one evo line and the right exit status: `address: auto` that finds a GCS that
does not answer (2, within seconds), a dashboard without Ray's extras (2, before Ray starts), the run's raylet
killed mid-run (1: every completed evaluation stored, the resume hint, Ray's own messages in RUN/ray.log), SIGTERM
while Ray starts (143, no Ray stack dump), two Ctrl-C 0.2 s apart (130). The first two run in this process and
start no Ray; the others run the smoke executor in a subprocess (slow)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evo.surface.cli import main

SMOKE = """\
name: edge
operator: gemm
problems: {{shapes: [64x64x64], dtypes: [fp16]}}
genome: {{BLOCK_M: [32, 64], BLOCK_N: [32, 64], BLOCK_K: [32, 64]}}
initial_random: 2
budget: {{evaluations: {n}}}
memory: false
executor: {{kind: smoke, compile_workers: 1{extra}}}
"""


def _experiment(tmp_path: Path, n: int = 10_000, extra: str = "") -> Path:
    exp = tmp_path / "edge.yaml"
    exp.write_text(SMOKE.format(n=n, extra=extra))
    return exp


def test_auto_that_finds_a_gcs_that_does_not_answer_is_one_line_within_seconds(tmp_path, monkeypatch, capsys):
    """Another session's raylet found through ps named a GCS this run could not reach: 255 s of retries."""
    from ray._private import services

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))  # no cluster `ray start` recorded
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset({f"127.0.0.1:{port}"}))
    t0 = time.monotonic()
    assert main(["run", str(_experiment(tmp_path, extra=", address: auto")), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 15
    assert err.count("\n") == 1 and "executor.address auto: the Ray instance found on this machine does not" in err
    assert not (tmp_path / "run").exists()


def test_a_dashboard_without_rays_extras_is_one_line_before_ray_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray.dashboard.optional_deps", None)  # as without aiohttp & co
    assert main(["run", str(_experiment(tmp_path, extra=", dashboard: true")), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Ray's dashboard needs Ray's default extras" in err and "pip install" in err
    assert not (tmp_path / "run").exists()


def _start(exp: Path, run: Path) -> subprocess.Popen:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "evo.surface.cli", "run", str(exp), "--out", str(run)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _rows(run: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
        try:
            return db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def _wait_rows(proc: subprocess.Popen, run: Path, n: int, timeout_s: float = 240) -> int:
    deadline = time.monotonic() + timeout_s
    while _rows(run) < n:
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()[1]}")
        if time.monotonic() > deadline:
            pytest.fail(f"fewer than {n} evaluations stored in {timeout_s:.0f} s")
        time.sleep(0.3)
    return _rows(run)


def _finish(proc: subprocess.Popen, timeout_s: float = 60) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_a_killed_raylet_ends_the_run_in_one_evo_line_with_the_resume_hint(tmp_path):
    from evo.evaluate.ray_guard import children_named

    run = tmp_path / "run"
    proc = _start(_experiment(tmp_path), run)
    try:
        _wait_rows(proc, run, 2)
        raylets = children_named(proc.pid, ("raylet",))
        assert len(raylets) == 1, "the run's embedded raylet is not a child of the driver"
        before = _rows(run)
        os.kill(next(iter(raylets)), signal.SIGKILL)
        t0 = time.monotonic()
        out, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 1, err
    assert err.count("\n") == 1 and err.startswith("evo: error: the Ray instance of this run died"), err
    assert "every completed evaluation is stored" in err and "--resume" in err and str(run / "ray.log") in err
    assert "state-dump" not in out + err and "(raylet)" not in out  # Ray's own lines went to its log
    assert "Raylet is terminated" in (run / "ray.log").read_text()
    assert _rows(run) >= before


@pytest.mark.slow
def test_sigterm_while_ray_starts_is_one_evo_line_and_143(tmp_path):
    run = tmp_path / "run"
    proc = _start(_experiment(tmp_path), run)
    try:
        while "starting smoke workers" not in proc.stdout.readline():  # the run's own handling is in place
            assert proc.poll() is None, proc.communicate()[1]
        time.sleep(1.0)  # Ray is starting (it takes seconds here)
        assert _rows(run) == 0, "Ray started too fast to test a SIGTERM during its start"
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 15
    assert proc.returncode == 143, err
    assert err.count("\n") == 1 and err.startswith("evo: interrupted"), err
    assert "Traceback" not in err and "SIGTERM" not in err


@pytest.mark.slow
def test_two_ctrl_c_0_2_s_apart_exit_130_with_the_resume_hint(tmp_path):
    """A terminal's Ctrl-C reaches the whole foreground group: the driver and every Ray process in it. The second
    one used to cut Ray's shutdown halfway: exit 1."""
    run = tmp_path / "run"
    proc = _start(_experiment(tmp_path), run)
    try:
        _wait_rows(proc, run, 2)
        before = _rows(run)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        t0 = time.monotonic()
        _, err = _finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "--resume" in err and "every completed evaluation is stored" in err
    assert _rows(run) >= before
