"""Faults a user meets around a run: a second writer, a resume of a changed experiment, a read-only or corrupt run
directory, a full disk, Ctrl-C before the search starts; and where outputs and hints go."""

from __future__ import annotations

import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evo.experiment.runlock import RunDirError, RunLock
from evo.store import Store
from evo.surface.cli import main
from tests.fixtures import search_fixtures as fx
from tests.fixtures.run_fixture import make_run

STAND_IN_CLI = textwrap.dedent("""
    import sys
    from tests.fixtures import search_fixtures as fx
    fx.register_now()
    import evo.search.run
    from evo.evaluate.executor import LocalExecutor
    real = evo.search.run.run_experiment
    evo.search.run.run_experiment = lambda exp, d, **kw: real(exp, d, executor=LocalExecutor(fx.StandInBackend()),
                                                                **kw)
    from evo.surface.cli import main
    sys.exit(main(sys.argv[1:]))
""")

AXPY = """name: axpy
operator: OPERATOR
problems: {{shapes: [512], dtypes: [fp32]}}
initial_random: 4
budget: {{evaluations: {n}}}
seed: {seed}
executor: {{kind: local}}
""".replace("OPERATOR", fx.OPERATOR)


def _cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", STAND_IN_CLI, *argv], capture_output=True, text=True, timeout=300)


def test_one_writer_per_run_directory(tmp_path):
    with RunLock(tmp_path / "run") as held:
        assert held.created and (tmp_path / "run" / "run.pid").exists()
        with pytest.raises(RunDirError, match=r"in use by another evo run \(pid \d+\)"):
            RunLock(tmp_path / "run").acquire()
    assert not (tmp_path / "run" / "run.pid").exists()
    with RunLock(tmp_path / "run"):  # released: the next run takes it
        pass
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file", tmp_path / "file" / "run"):
        with pytest.raises(RunDirError, match="file"):
            RunLock(path).acquire()


def test_resume_of_a_changed_experiment_is_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    fx.register(monkeypatch)
    exp, run = tmp_path / "axpy.yaml", tmp_path / "run"
    exp.write_text(AXPY.format(n=6, seed=0))
    done = _cli("run", str(exp), "--out", str(run))
    assert done.returncode == 0, done.stderr
    exp.write_text(AXPY.format(n=9, seed=0))  # a larger budget is not a change of results
    assert _cli("run", str(exp), "--out", str(run), "--resume").returncode == 0
    exp.write_text(AXPY.format(n=12, seed=7).replace("initial_random: 4", "initial_random: 5"))
    refused = _cli("run", str(exp), "--out", str(run), "--resume")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "seed: 0 -> 7" in refused.stderr and "initial_random: 4 -> 5" in refused.stderr
    assert "--allow-changes" in refused.stderr
    assert "seed: 0" in (run / "experiment.yaml").read_text()  # the copy still describes the run
    allowed = _cli("run", str(exp), "--out", str(run), "--resume", "--allow-changes")
    assert allowed.returncode == 0, allowed.stderr
    assert (run / "experiment.yaml").read_text() == exp.read_text()
    with Store(run / "store.sqlite", readonly=True) as store:
        resumes = store.meta("resumes")
        assert [r["session"] for r in resumes] == [2, 3]
        assert resumes[0]["changes"] == [] and "budget: {evaluations: 6}" in resumes[0]["previous_experiment"]
        assert "seed: 0 -> 7" in resumes[1]["changes"] and "seed: 0" in resumes[1]["previous_experiment"]
        assert store.count() == 12


def _without_write_permission() -> list[str] | None:
    """A command prefix that runs without root's right to ignore file permissions (None when unavailable)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search,-fowner", "--"]
    probe = subprocess.run([*prefix, sys.executable, "-c", "print(1)"], capture_output=True, text=True)
    return prefix if probe.returncode == 0 else None


def test_a_read_only_run_can_be_inspected(tmp_path):
    prefix = _without_write_permission()
    if prefix is None:
        pytest.skip("setpriv cannot drop the right to override file permissions here")
    run = make_run(tmp_path / "runs", shapes=("64x64x64",))
    with Store(run / "store.sqlite") as store:  # what a finished run leaves: no -wal or -shm file
        store.count()
    for p in [run, *run.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    out = tmp_path / "out"
    out.mkdir()
    try:
        touch = subprocess.run([*prefix, "touch", str(run / "x")], capture_output=True)
        assert touch.returncode != 0, "the run directory is writable: the test would prove nothing"
        evo = [*prefix, sys.executable, "-m", "evo.surface.cli"]
        for argv in (["status", str(run)], ["export", str(run), "--shape", "64x64x64", "-o", str(out / "k.py")],
                     ["report", str(run), "-o", str(out / "r.html")]):
            r = subprocess.run([*evo, *argv], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0 and "Traceback" not in r.stderr, (argv, r.stderr)
        r = subprocess.run([*evo, "report", str(run)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot write" in r.stderr
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before  # never written
    finally:
        for p in [run, *run.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
    assert (out / "k.py").exists() and (out / "r.html").stat().st_size > 100_000


def test_a_corrupt_store_is_one_line(tmp_path, capsys):
    run = make_run(tmp_path / "runs")
    data = bytearray((run / "store.sqlite").read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    (run / "store.sqlite").write_bytes(bytes(data))
    for argv in (["status", str(run)], ["export", str(run), "--all"], ["report", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "store.sqlite" in err and "cannot be opened" in err
    (run / "store.sqlite").write_text("not a database at all")
    assert main(["status", str(run)]) == 2 and "cannot be opened" in capsys.readouterr().err


def test_a_full_disk_is_one_line_and_keeps_every_row(tmp_path, monkeypatch):
    fx.register(monkeypatch)
    disk = tmp_path / "disk"
    disk.mkdir()
    # 800 KiB: room for the store, its kept kernel sources and a dozen rows before the disk fills mid-run
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=800k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        exp, run = tmp_path / "axpy.yaml", disk / "run"
        exp.write_text(AXPY.format(n=5000, seed=0))
        full = _cli("run", str(exp), "--out", str(run))
        assert full.returncode == 1, full.stderr
        assert full.stderr.count("\n") == 1 and "no space left" in full.stderr and "--resume" in full.stderr
        with Store(run / "store.sqlite", readonly=True) as store:
            stored = store.count()
            rows = store.evaluations()
        assert stored > 10 and all(r.status for r in rows)
        subprocess.run(["mount", "-o", "remount,size=8m", str(disk)], check=True)
        exp.write_text(AXPY.format(n=stored + 5, seed=0))
        resumed = _cli("run", str(exp), "--out", str(run), "--resume")
        assert resumed.returncode == 0, resumed.stderr
        with Store(run / "store.sqlite", readonly=True) as store:
            assert store.count() == stored + 5
            assert [r.genome_hash for r in store.evaluations()][:stored] == [r.genome_hash for r in rows]
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _run_raising(exc: BaseException, tmp_path, monkeypatch) -> int:
    """`evo run` of a small GEMM experiment whose search raises `exc` at once; returns the exit status."""
    import evo.search.run

    def raising(*args, **kw):
        raise exc

    monkeypatch.setattr(evo.search.run, "run_experiment", raising)
    exp = tmp_path / "e.yaml"
    exp.write_text(AXPY.format(n=5, seed=0).replace(fx.OPERATOR, "gemm").replace("[512], dtypes: [fp32]",
                                                                             "[64x64x64], dtypes: [fp16]"))
    return main(["run", str(exp), "--out", str(tmp_path / "r")])


def test_ctrl_c_before_the_search_starts_says_so(tmp_path, monkeypatch, capsys):
    assert _run_raising(KeyboardInterrupt(), tmp_path, monkeypatch) == 130
    err = capsys.readouterr().err
    assert "interrupted before the search started: nothing was evaluated" in err and err.count("\n") == 1


def test_losing_every_worker_is_one_line_with_the_resume_hint(tmp_path, monkeypatch, capsys):
    from evo.evaluate.executor import WorkersLost

    lost = WorkersLost("every GPU worker died repeatedly; completed evaluations are stored")
    assert _run_raising(lost, tmp_path, monkeypatch) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "died repeatedly" in err and "--resume" in err


def test_outputs_go_into_the_run_directory_and_hints_are_quoted(tmp_path, monkeypatch, capsys):
    run = make_run(tmp_path / "my runs", name="odd name's", fast_elite={"BLOCK_M": 32, "BLOCK_N": 32})
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").exists() and not (tmp_path / "reports").exists()
    assert main(["export", str(run), "--shape", "64x64x64"]) == 0
    out = capsys.readouterr().out
    assert (run / "gemm_64x64x64_fp16.py").exists()
    hint = next(line for line in out.splitlines() if line.startswith("check it: "))
    assert shlex.split(hint.removeprefix("check it: ")) == ["python", str(run / "gemm_64x64x64_fp16.py")]
    assert main(["status", str(run)]) == 0
    with sqlite3.connect(run / "store.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] > 0


def test_a_reader_that_goes_away_is_no_traceback():
    """`evo genes gemm | head -1`: the reader closes the pipe; evo stops quietly (status 141, as cat does)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from evo.surface.cli import main; "
                             "sys.exit(main(['genes', 'gemm']))"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before evo writes a line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""


def test_a_cluster_address_nobody_answers_is_one_line_at_once(tmp_path, capsys):
    import socket
    import time

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exp = tmp_path / "e.yaml"
    exp.write_text("operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\n"
                   f"executor: {{kind: smoke, address: '127.0.0.1:{port}'}}\n")
    t0 = time.monotonic()
    assert main(["run", str(exp), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no Ray cluster answers at 127.0.0.1:{port}" in err
    assert time.monotonic() - t0 < 30 and not (tmp_path / "run").exists()


def test_allow_changes_without_resume_is_refused(tmp_path, capsys):
    exp = tmp_path / "e.yaml"
    exp.write_text("operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\nexecutor: {kind: smoke}\n")
    assert main(["run", str(exp), "--out", str(tmp_path / "r"), "--allow-changes"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--allow-changes goes with --resume" in err and not (tmp_path / "r").exists()


def test_a_run_directory_a_live_run_holds_is_refused_as_in_use_before_anything(tmp_path, capsys):
    # issue 41: the refusal of a new run advised --resume, which then failed with "in use by another evo run"
    run = make_run(tmp_path / "runs")
    with RunLock(run):  # the live run
        for resume in ([], ["--resume"]):
            assert main(["run", str(run / "experiment.yaml"), "--out", str(run), *resume]) == 2
            captured = capsys.readouterr()
            assert captured.out == ""  # refused before the start-up lines
            (line,) = captured.err.splitlines()
            assert re.search(r"in use by another evo run \(pid \d+\)", line) and "pass --resume" not in line
    assert main(["run", str(run / "experiment.yaml"), "--out", str(run)]) == 2  # ended: the advice fits now
    assert "pass --resume to continue it" in capsys.readouterr().err


def test_a_new_run_where_it_cannot_write_is_one_line_before_any_output(tmp_path):
    prefix = _without_write_permission()
    if prefix is None:
        pytest.skip("setpriv cannot drop the right to override file permissions here")
    locked = tmp_path / "read-only"
    locked.mkdir()
    locked.chmod(0o555)
    smoke = Path(__file__).resolve().parents[2] / "experiments" / "smoke.yaml"
    try:
        for out in (locked / "run", locked):  # a run directory to be made in it, and an empty one to write
            done = subprocess.run([*prefix, sys.executable, "-m", "evo.surface.cli", "run", str(smoke), "--out",
                                   str(out)], capture_output=True, text=True, timeout=120)
            assert done.returncode == 2 and done.stdout == "", done.stdout
            (line,) = done.stderr.splitlines()
            assert f"{locked} is not writable by this user" in line
    finally:
        locked.chmod(0o755)
    assert not (locked / "run").exists()
