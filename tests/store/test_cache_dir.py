"""Where the results database goes in odd environments (no HOME, HOME '/', HOME a file, a relative XDG path), and
a results database that cannot be used (a symlink loop): one line, and the run goes on without it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.experiment.spec import MemorySpec
from evo.search.run import run_experiment
from evo.store.cache_dir import cache_root
from evo.store.shared import ENV_VAR, default_path, open_shared
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


@pytest.fixture
def bare_env(monkeypatch):
    for name in ("HOME", "XDG_CACHE_HOME", ENV_VAR):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_platform_cache_when_it_can_be_written(bare_env, tmp_path):
    bare_env.setenv("HOME", str(tmp_path / "home"))  # not made yet: ~/.cache is created under it
    (tmp_path / "home").mkdir()
    assert cache_root(tmp_path / "run") == tmp_path / "home" / ".cache"
    bare_env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root(tmp_path / "run") == tmp_path / "xdg"


@pytest.mark.parametrize("home", ["/", "relative/home", "FILE", "FILE/below"])
def test_an_unusable_home_falls_back_to_the_run_directory(bare_env, tmp_path, home):
    (tmp_path / "FILE").write_text("not a directory")
    bare_env.setenv("HOME", home.replace("FILE", str(tmp_path / "FILE")))
    bare_env.setenv("XDG_CACHE_HOME", "relative/xdg")  # ignored, as the XDG spec says
    assert cache_root(tmp_path / "run") == tmp_path / "run"
    assert default_path(None, tmp_path / "run") == tmp_path / "run" / "evo" / "results.sqlite"


def test_no_home_and_no_password_entry(bare_env, tmp_path):
    def no_entry():
        raise RuntimeError("Could not determine home directory.")

    bare_env.setattr(Path, "home", staticmethod(no_entry))
    assert cache_root(tmp_path / "run") == tmp_path / "run"
    assert cache_root() == Path(tempfile.gettempdir()) / f"evo-cache-{os.getuid()}"  # no run directory either


def _loop(tmp_path) -> Path:
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    return tmp_path / "a" / "sub" / "results.sqlite"


def test_a_results_database_under_a_symlink_loop_is_one_line(tmp_path):
    path = _loop(tmp_path)
    shared, notice = open_shared(path)
    assert shared is None and "\n" not in notice
    assert str(path) in notice and "goes on without it" in notice


def test_the_run_goes_on_without_the_results_database(tmp_path, monkeypatch):
    fx.register(monkeypatch)
    monkeypatch.setenv(ENV_VAR, str(_loop(tmp_path)))
    messages = []
    exp = fx.experiment(sizes=(512,), evaluations=6, memory=MemorySpec(enabled=True))
    on_event = lambda e: messages.append(e.message) if e.kind == "message" else None  # noqa: E731
    run_experiment(exp, tmp_path / "run", executor=LocalExecutor(fx.StandInBackend()), on_event=on_event)
    assert sum("results database" in m and "goes on without it" in m for m in messages) == 1
    with Store(tmp_path / "run" / "store.sqlite", readonly=True) as store:
        assert store.count() >= 6
