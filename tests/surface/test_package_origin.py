"""A folder named evo beside a script (a clone of evo's repository) hides the package: `python -m evo`, evo.api's
loaders and the export header say so in one line instead of `cannot import name '__version__' from 'evo'`."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest

import evo
from evo.surface.package_origin import ShadowedPackage, evo_version, shadowing_folder


def test_the_package_itself_is_not_shadowed():
    assert shadowing_folder() is None and evo_version() == evo.__version__


def test_a_namespace_evo_is_named_with_what_to_do(monkeypatch, tmp_path):
    folder = types.ModuleType("evo")
    folder.__path__ = [str(tmp_path / "evo")]  # what Python makes of a folder without __init__.py
    folder.__file__ = None
    monkeypatch.setitem(sys.modules, "evo", folder)
    assert shadowing_folder() == str(tmp_path / "evo")
    with pytest.raises(ShadowedPackage, match="was imported as the package evo.*run from another directory") as e:
        evo_version()
    assert "\n" not in str(e.value)


@pytest.fixture
def beside_a_clone(tmp_path):
    """A directory holding a folder named evo (a clone's top: README, no __init__.py), and python run there."""
    (tmp_path / "evo").mkdir()
    (tmp_path / "evo" / "README.md").write_text("a clone of evo\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([sys.executable, "-c", "import evo.api"], cwd=tmp_path, env=env, capture_output=True)
    if probe.returncode:  # only an editable install's finder reaches evo's modules past the folder at all
        pytest.skip("evo is not installed editable here: nothing of evo can run beside the folder")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)

    return tmp_path, run


def test_python_m_evo_beside_a_clone_is_one_line(beside_a_clone):
    folder, run = beside_a_clone
    done = run("-m", "evo", "--version")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"evo: error: the folder {folder / 'evo'} was imported as the package evo")
    assert "rename that folder" in line


def test_evo_api_load_beside_a_clone_is_one_load_error(beside_a_clone):
    folder, run = beside_a_clone
    for loader in ("load", "load_zoo"):
        done = run("-c", f"from evo.api import LoadError, {loader}\ntry:\n    {loader}('x.py')\n"
                         "except LoadError as e:\n    print(e)")
        assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
        (line,) = done.stdout.splitlines()
        assert line.startswith(f"the folder {folder / 'evo'} was imported as the package evo")
