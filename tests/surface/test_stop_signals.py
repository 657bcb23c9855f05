"""SIGTERM and SIGHUP stop `evo run` as Ctrl-C does (every completed evaluation stored, the resume hint, exit
128 + signal), a second signal during the stop does not cut it short, and a closed or broken stdout never ends a
run. The fast tests drive the handler itself; the slow ones run the smoke executor in a subprocess and send the
signal."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from evo.surface.safe_stream import DroppingStream
from evo.surface.stop_signals import StopSignals

SMOKE = """\
name: sig_smoke
operator: gemm
problems: {{shapes: [64x64x64], dtypes: [fp16]}}
genome: {{BLOCK_M: [32, 64], BLOCK_N: [32, 64], BLOCK_K: [32, 64]}}
initial_random: 2
budget: {{evaluations: {n}}}
executor: {{kind: smoke, compile_workers: 1}}
"""


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_interrupts_once_and_sets_the_exit_status(sig, status):
    before = signal.getsignal(sig)
    with StopSignals() as stops:
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(15))  # what Ray's init does to the driver
        stops.reassert()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), sig)
            time.sleep(1)
        os.kill(os.getpid(), sig)  # a second one during the shutdown is absorbed
        time.sleep(0.05)
        assert stops.exit_status() == status
    assert signal.getsignal(sig) == before  # the handlers of before the run are back


def test_two_ctrl_c_interrupt_once_and_exit_130():
    """The second Ctrl-C of two 0.2 s apart used to land in the middle of Ray's shutdown: exit 1, not 130."""
    with StopSignals() as stops:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGINT)  # during the stop the first one started: absorbed
        time.sleep(0.05)
        assert stops.exit_status() == 130


def test_a_signal_long_after_the_first_interrupts_again():
    """A stop that hangs can still be interrupted: repeats are absorbed only for a while."""
    with StopSignals(absorb_s=0.1) as stops:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        time.sleep(0.2)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert stops.exit_status() == 143  # the first signal decides the status


def test_a_signal_ignored_before_stays_ignored():
    """`nohup evo run ...` ignores SIGHUP: closing the terminal must not stop the run."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with StopSignals() as stops:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)
            assert stops.received is None
    finally:
        signal.signal(signal.SIGHUP, before)


def test_no_signal_means_the_ctrl_c_status():
    with StopSignals() as stops:
        pass
    assert stops.exit_status() == 130


def test_a_dropping_stream_drops_after_the_first_failure():
    class Broken:
        writes = 0

        def write(self, text):
            Broken.writes += 1
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise ValueError("I/O operation on closed file")

    out = DroppingStream(Broken())
    assert out.write("a\n") == 2 and out.dropped
    out.write("b\n")
    out.flush()
    assert Broken.writes == 1 and not out.isatty()


def _start(tmp_path, n, **popen):
    exp = tmp_path / "sig_smoke.yaml"
    exp.write_text(SMOKE.format(n=n))
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "evo.surface.cli", "run", str(exp), "--out", str(tmp_path / "run")],
                            env=env, stderr=subprocess.PIPE, text=True, cwd=os.getcwd(), **popen)


def _count(run) -> int:
    try:
        db = sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True)
        try:
            return db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_mid_run_stores_everything_and_prints_the_hint(tmp_path, sig, status):
    proc = _start(tmp_path, 10_000, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while _count(tmp_path / "run") < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        before = _count(tmp_path / "run")
        assert before >= 2, proc.stderr.read() if proc.poll() is not None else "no evaluations in 240 s"
        proc.send_signal(sig)
        err = proc.communicate(timeout=120)[1]
    finally:
        proc.kill()
    assert proc.returncode == status, err
    assert "Traceback" not in err and "--resume" in err and "every completed evaluation is stored" in err
    assert _count(tmp_path / "run") >= before


@pytest.mark.slow
@pytest.mark.parametrize("how", ["closed", "broken"])
def test_a_closed_or_broken_stdout_never_ends_a_run(tmp_path, how):
    if how == "closed":  # `evo run ... >&-`
        proc = _start(tmp_path, 4, stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    else:  # a reader that went away at once
        proc = _start(tmp_path, 4, stdout=subprocess.PIPE)
        proc.stdout.close()
    err = proc.communicate(timeout=300)[1]
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert _count(tmp_path / "run") >= 4
