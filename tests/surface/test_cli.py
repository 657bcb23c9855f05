"""The `evo` command line: version, help, status, the run command's glue, and one-line errors (exit 2)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import types

import pytest

from evo import __version__
from evo.experiment.rundir import RunDir
from evo.search.events import SearchEvent
from evo.store.sqlite import Store
from evo.surface.cli import main
from tests.conftest import HAS_CUDA
from tests.fixtures.run_fixture import TEST_GPU, make_run


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    assert all(cmd in out for cmd in ("run", "status", "export", "report"))
    assert main([]) == 2


@pytest.mark.parametrize("argv", [["export"], ["run"], ["status", "a", "b"], ["frobnicate"], ["report", "--x"]])
def test_usage_errors_are_one_line(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("evo")


def test_console_script_errors_without_traceback(tmp_path):
    exe = [sys.executable, "-m", "evo.surface.cli"]
    result = subprocess.run([*exe, "run", str(tmp_path / "missing.yaml")], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "missing.yaml" in result.stderr and "Traceback" not in result.stderr
    result = subprocess.run([*exe, "status", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 2 and "not a run directory" in result.stderr and "Traceback" not in result.stderr


def test_status_table(tmp_path, capsys):
    run = make_run(tmp_path, shapes=("64x64x64", "48x80x64"))
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    with Store(run / "store.sqlite") as store:
        evs = store.evaluations("gemm:64x64x64:fp16")
        assert f"{store.count()} evaluations" in lines[0]
    header = next(i for i, line in enumerate(lines) if line.startswith("problem"))
    rows = lines[header + 2:]
    rows = rows[:rows.index("")] if "" in rows else rows  # (notes of budgets cut short follow the table)
    assert [r.split()[0] for r in rows] == ["gemm:64x64x64:fp16", "gemm:48x80x64:fp16"]
    ok = sum(ev.status == "ok" for ev in evs)
    assert rows[0].split()[1:3] == [str(len(evs)), str(ok)]
    assert "cmp 2" in rows[0] and "TFLOP/s" in rows[0] and "x torch-test" in rows[0] and "%" in rows[0]


def test_status_of_a_smoke_run_says_not_a_timing(tmp_path, capsys):
    run = make_run(tmp_path, name="smk", smoke=True, n_random=3)
    assert main(["status", str(run)]) == 0
    assert "NOT a timing" in capsys.readouterr().out


# -- evo run, with the search replaced by a stand-in that writes test rows ---------------------------------
def _event(kind, key, n, best=None, **extra):
    return SearchEvent(kind=kind, problem_key=key, problem_index=0, problems=1, evaluations=n, budget=4,
                       best=best, best_ratio=1.5 if best else None, unit="TFLOP/s", failures={"wrong": 1},
                       busy_workers=1, total_workers=2, coverage=0.1, qd_score=best or 0.0, elapsed_s=1.0, **extra)


@pytest.fixture
def fake_search(monkeypatch, tmp_path):
    fake = types.SimpleNamespace(calls=[], interrupted=False)

    def run_experiment(experiment, run_dir, resume=False, on_event=None, **kw):
        fake.calls.append((experiment.name, str(run_dir), resume))
        src = make_run(tmp_path / "fake", name="src")  # test rows to copy in
        rd = RunDir(run_dir)
        rd.path.mkdir(parents=True, exist_ok=True)
        rd.experiment.write_text(experiment.source)
        key = experiment.problems[0].key
        with Store(src / "store.sqlite") as a, Store(rd.store) as b:
            for ev in a.iter(key):
                b.add(dataclasses.replace(ev, id=None))
        on_event(_event("problem_start", key, 0))
        on_event(_event("evaluation", key, 1, best=10.0))
        on_event(_event("evaluation", key, 2, best=12.0))
        on_event(_event("problem_done", key, 2, best=12.0, reason="evaluations"))
        # the CLI reads only `interrupted` of the search's RunSummary
        return types.SimpleNamespace(name=experiment.name, run_dir=str(rd.path), interrupted=fake.interrupted)

    import evo.search.run

    monkeypatch.setattr(evo.search.run, "run_experiment", run_experiment)
    return fake


EXP = "name: clitest\noperator: gemm\nproblems:\n  shapes: [64x64x64]\n  dtypes: [fp16]\noutput: {out}\n"


def test_run_shows_progress_and_status(fake_search, tmp_path, capsys):
    exp = tmp_path / "e.yaml"
    exp.write_text(EXP.format(out=tmp_path / "runs"))
    assert main(["run", str(exp)]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "runs" / "clitest"
    assert fake_search.calls == [("clitest", str(run_dir), False)]
    assert "new best 12 TFLOP/s (1.50x baseline)" in out  # plain log lines: stdout is not a terminal
    assert "gemm:64x64x64:fp16: done (evaluations)" in out
    assert "gemm:64x64x64:fp16" in out.split("problem")[-1]  # the status table follows
    assert f"evo report {run_dir}" in out
    assert RunDir(run_dir).experiment.read_text() == exp.read_text()  # the run keeps a copy of the YAML
    # a second run into the same directory must be asked for
    assert main(["run", str(exp)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["run", str(exp), "--resume"]) == 0
    assert fake_search.calls[-1][2] is True
    assert main(["run", str(exp), "--out", str(tmp_path / "other"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_interrupted_run_exits_130_with_a_hint(fake_search, tmp_path, capsys):
    fake_search.interrupted = True
    exp = tmp_path / "e.yaml"
    exp.write_text(EXP.format(out=tmp_path / "runs"))
    assert main(["run", str(exp), "--out", str(tmp_path / "mine")]) == 130
    err = capsys.readouterr().err
    assert "--resume" in err and str(tmp_path / "mine") in err


def test_fixture_rows_are_marked_as_test_data(tmp_path):
    run = make_run(tmp_path, n_random=2)
    with Store(run / "store.sqlite") as store:
        assert {ev.gpu for ev in store.iter()} == {TEST_GPU}
        assert {ev.worker for ev in store.iter()} == {"test-fixture"}


SMOKE = """\
name: tiny_smoke
operator: gemm
problems: {{shapes: [64x64x64], dtypes: [fp16]}}
genome: {{BLOCK_M: [32, 64], BLOCK_N: [32, 64], BLOCK_K: [32, 64]}}
initial_random: 2
budget: {{evaluations: 6}}
executor: {{kind: smoke, compile_workers: 1}}
output: {output}
"""


@pytest.mark.slow
@pytest.mark.slow
def test_smoke_run_end_to_end(tmp_path, capsys, monkeypatch):
    """The real search in smoke mode, then status, export (self-checked in the interpreter) and report."""
    # tests/conftest.py sets TRITON_INTERPRET=1, as CPU users often do: compiling ahead must work regardless
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    exp = tmp_path / "tiny_smoke.yaml"
    exp.write_text(SMOKE.format(output=tmp_path / "runs"))
    assert main(["run", str(exp)]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "runs" / "tiny_smoke"
    assert "NOT a timing" in out and "gemm:64x64x64:fp16" in out
    with Store(run / "store.sqlite") as store:
        assert store.count() >= 6
        assert {ev.gpu for ev in store.iter()} == {"cpu-interpreter"}
        assert {ev.status for ev in store.iter()} == {"ok"}, {ev.status: ev.reason for ev in store.iter()}
    kernel = tmp_path / "k.py"
    assert main(["export", str(run), "--shape", "64x64x64", "-o", str(kernel)]) == 0
    assert "NOT a timing" in kernel.read_text().split("import os", 1)[0]
    result = subprocess.run([sys.executable, str(kernel)], capture_output=True, text=True, cwd=tmp_path,
                            timeout=300)
    assert result.returncode == 0 and "PASS" in result.stdout, result.stdout + result.stderr
    assert main(["report", str(run), "-o", str(tmp_path / "r.html")]) == 0


def test_genes_lists_domains_and_descriptors(capsys):
    assert main(["genes"]) == 0
    assert "gemm" in capsys.readouterr().out
    assert main(["genes", "gemm"]) == 0
    out = capsys.readouterr().out
    assert "BLOCK_M" in out and "[16, 32, 64, 128, 256]" in out and "tile_area" in out
    assert "[false, true]" in out  # written as YAML spells it
    assert "min_evaluations 24" in out and "first measured candidate" in out  # the budget's floor (issue 40)
    assert main(["genes", "conv"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.skipif(HAS_CUDA, reason="checks the message a machine without a GPU gets")
def test_a_gpu_run_without_a_gpu_is_one_line_and_leaves_nothing(tmp_path, capsys):
    exp = tmp_path / "tiny_gpu.yaml"
    exp.write_text(SMOKE.format(output=tmp_path / "runs").replace("kind: smoke", "kind: local"))
    assert main(["run", str(exp)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evo: error: cannot start the local executor")
    assert not (tmp_path / "runs" / "tiny_smoke").exists()  # a retry is not blocked by a half-made run


def test_a_smoke_run_cannot_be_resumed_as_a_gpu_run(tmp_path, capsys):
    from evo.store.sqlite import Store

    run = tmp_path / "runs" / "tiny_smoke"
    run.mkdir(parents=True)
    with Store(run / "store.sqlite") as store:  # what a smoke session leaves in a run's metadata
        for key, value in (("experiment", "tiny_smoke"), ("operator", "gemm"), ("seed", 0), ("executor", "smoke")):
            store.set_meta(key, value)
    exp = tmp_path / "tiny_gpu.yaml"
    exp.write_text(SMOKE.format(output=tmp_path / "runs").replace("kind: smoke", "kind: local"))
    assert main(["run", str(exp), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "cannot resume" in err and "smoke" in err and err.count("\n") == 1
    with Store(run / "store.sqlite") as store:
        assert store.count() == 0 and store.meta("executor") == "smoke"  # the run is left as it was
