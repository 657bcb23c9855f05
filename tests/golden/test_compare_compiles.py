"""tests/golden/compare_compiles.py: the goldens of HEAD against today's renderings compile alike (one case), and a
revision git does not know is one clear line with exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compiling needs the real JIT
    env.update(TRITON_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tests.golden.compare_compiles", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_head_compiles_alike_with_itself(tmp_path):
    result = _run("HEAD", "--select", "gemm", "--match", "16x4096x8192-fp16/ptr-splitk", tmp_path=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 cases: 1 compile alike" in result.stdout and "same  gemm/16x4096x8192-fp16/ptr-splitk" in result.stdout


def test_an_unknown_revision_is_one_line(tmp_path):
    result = _run("no-such-revision", tmp_path=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().startswith("compare_compiles: git cannot show the goldens of 'no-such-revision'")
