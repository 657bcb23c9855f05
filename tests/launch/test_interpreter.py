"""No GPU: one behaviour everywhere (issue 41). evo.launch.interpreter's rule, and the three ways a user meets it on
a CPU machine with TRITON_INTERPRET unset: an exported module's self-check, a zoo module's self-check and
evo.api.load each run the kernels in Triton's interpreter and say so in one line (never Triton's "0 active
drivers"); a process that imported triton first is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evo.launch import interpreter
from evo.launch.interpreter import NO_GPU_LINE, NoDevice, use_interpreter_without_gpu

ROOT = Path(__file__).resolve().parents[2]
FAST = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)  # one program per 64x64 tile: quick in the interpreter


@pytest.fixture
def no_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # restored after the test


def test_without_a_gpu_it_switches_to_the_interpreter(no_gpu, monkeypatch):
    monkeypatch.delitem(sys.modules, "triton", raising=False)  # as in a process that has not imported triton yet
    assert use_interpreter_without_gpu() is True
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert use_interpreter_without_gpu() is False  # chosen now: nothing more to do, nothing more to say


def test_a_triton_imported_for_a_gpu_is_refused_in_one_line(no_gpu, monkeypatch):
    import triton  # noqa: F401

    monkeypatch.setattr(interpreter, "_interpreting", lambda: False)
    with pytest.raises(NoDevice, match="triton was imported before evo could switch") as refused:
        use_interpreter_without_gpu()
    assert "\n" not in str(refused.value) and "TRITON_INTERPRET" not in os.environ


def test_interpreter_turned_off_without_a_gpu_is_refused(no_gpu, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(NoDevice, match="TRITON_INTERPRET=0 turns off"):
        use_interpreter_without_gpu()


def test_a_gpu_or_the_interpreter_chosen_needs_nothing(monkeypatch):
    import torch

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert use_interpreter_without_gpu() is False
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert use_interpreter_without_gpu() is False and "TRITON_INTERPRET" not in os.environ


def _cpu_run(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """`python ARGS` as on a machine without a GPU, TRITON_INTERPRET unset."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    env.update(CUDA_VISIBLE_DEVICES="", EVO_KERNEL_DIR=str(tmp_path / "kernels"))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def gemm_run(tmp_path_factory):
    from tests.fixtures.run_fixture import make_run

    return make_run(tmp_path_factory.mktemp("runs"), name="tiny_gemm", shapes=("64x64x64",), dtype="fp32",
                    fast_elite=FAST, smoke=True)


def test_an_exported_module_self_checks_in_the_interpreter_and_says_so(gemm_run, tmp_path):
    from evo.store.sqlite import Store
    from evo.surface.export import export_one

    with Store(gemm_run / "store.sqlite", readonly=True) as store:
        (tmp_path / "kernel.py").write_text(export_one(store, (64, 64, 64))[0])
    done = _cpu_run([str(tmp_path / "kernel.py")], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [NO_GPU_LINE] and "PASS" in done.stdout


def test_a_zoo_module_self_checks_in_the_interpreter_and_says_so(gemm_run, tmp_path):
    from evo.surface.zoo_collect import collect
    from evo.zoo import load_model

    spec = load_model(ROOT / "experiments" / "models" / "tiny.yaml")
    path, served, _ = collect(spec, [32], "fp32", gemm_run.parent)  # (above 16 tokens the projections are gemm's)
    assert "gemm" in served.values()
    done = _cpu_run([str(path)], tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.splitlines() == [NO_GPU_LINE] and "PASS" in done.stdout and "active drivers" not in done.stderr


LOAD = """
import sys, torch
{first}from evo.api import LoadError, load
try:
    mm = load(sys.argv[1], shape="64x64x64")
except LoadError as e:
    print("LoadError:", e)
    raise SystemExit(2)
a, b = torch.randn(64, 64), torch.randn(64, 64)
print("max error", float((mm(a, b) - a @ b).abs().max()))
"""


def test_evo_api_load_runs_the_kernel_in_the_interpreter_with_one_warning(gemm_run, tmp_path):
    done = _cpu_run(["-c", LOAD.format(first=""), str(gemm_run)], ROOT, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.split("max error")[1]) < 1e-4
    assert done.stderr.count(NO_GPU_LINE) == 1 and "Traceback" not in done.stderr


def test_evo_api_load_after_triton_was_imported_is_one_load_error(gemm_run, tmp_path):
    done = _cpu_run(["-c", LOAD.format(first="import triton\n"), str(gemm_run)], ROOT, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout.startswith("LoadError:") and "triton was imported before evo could switch" in done.stdout
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in done.stderr
