"""The user's path on a real GPU: `evo run` of a tiny experiment, then `evo status`, `evo export` (the module
checks itself against torch and times itself against cuBLAS) and `evo report`. Run on the GPU machine:
    python3 -m pytest tests/gpu/test_user_surface_gpu.py -q
(about 1-3 minutes: one small bf16 GEMM, 16 evaluations, in-process executor)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

EXPERIMENT = """\
name: gpu_surface
operator: gemm
problems:
  shapes: [512x768x1024]
  dtypes: [bf16]
descriptors: [tile_area, block_k]
initial_random: 4
budget:
  evaluations: 16
seed: 0
executor:
  kind: local
evaluation:
  reps: 10
output: {output}
"""


def test_run_status_export_report_on_a_gpu(tmp_path, capsys):
    from evo.store.sqlite import Store
    from evo.surface.cli import main

    exp = tmp_path / "gpu_surface.yaml"
    exp.write_text(EXPERIMENT.format(output=tmp_path / "runs"))
    assert main(["run", str(exp)]) == 0
    run = tmp_path / "runs" / "gpu_surface"
    out = capsys.readouterr().out
    assert "gemm:512x768x1024:bf16" in out and "NOT a timing" not in out

    with Store(run / "store.sqlite") as store:
        evs = store.evaluations("gemm:512x768x1024:bf16")
        assert len(evs) >= 16
        ok = [ev for ev in evs if ev.status == "ok"]
        assert ok, {ev.status: ev.reason for ev in evs}
        assert all(ev.baseline_ms and ev.median_ms and "cpu" not in ev.gpu.lower() for ev in ok)

    assert main(["status", str(run)]) == 0
    assert "TFLOP/s" in capsys.readouterr().out

    kernel = tmp_path / "kernel.py"
    assert main(["export", str(run), "--shape", "512x768x1024", "-o", str(kernel)]) == 0
    header = kernel.read_text().split("import os", 1)[0]
    assert "Median time" in header and "Baseline cublas" in header
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the module must run on the GPU, not in the interpreter
    result = subprocess.run([sys.executable, str(kernel)], capture_output=True, text=True, env=env, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "on cuda" in result.stdout and "PASS" in result.stdout and "GPU time" in result.stdout
    assert "call clock" in result.stdout and "host time of one call" in result.stdout
    print(result.stdout)  # shown with -s: the exported kernel's own timing against cuBLAS

    all_kernels = tmp_path / "all.py"
    assert main(["export", str(run), "--all", "-o", str(all_kernels)]) == 0
    result = subprocess.run([sys.executable, str(all_kernels)], capture_output=True, text=True, env=env,
                            timeout=300, cwd=tmp_path)
    assert result.returncode == 0 and "PASS" in result.stdout, result.stdout + result.stderr

    report = tmp_path / "report.html"
    code = main(["report", str(run), "-o", str(report)])
    if importlib.util.find_spec("plotly") is None:  # the GPU machine has no plotly: one line naming it, exit 2
        assert code == 2 and "'plotly'" in capsys.readouterr().err and not report.exists()
        return
    assert code == 0
    assert report.stat().st_size > 1_000_000
