"""`evo report` and `evo export` onto a full disk: one line, exit 2, and no truncated file (the old one stays)."""

from __future__ import annotations

import errno

import pytest

from evo.store import atomic_file
from evo.surface.cli import main
from tests.fixtures.run_fixture import make_run

FAST = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 2, "GROUP_M": 1}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs"), fast_elite=FAST)


@pytest.mark.parametrize("argv", [["report"], ["export", "--shape", "64x64x64"]])
@pytest.mark.parametrize("existed", [False, True])
def test_a_full_disk_leaves_the_old_file_or_none(run, tmp_path, capsys, monkeypatch, argv, existed):
    out = tmp_path / "out.file"
    if existed:
        out.write_text("earlier output")
    real = atomic_file.os.write

    def half_then_full(fd, data):  # the disk fills after the first half of the file
        if len(data) > 1000:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_file.os, "write", half_then_full)
    assert main([argv[0], str(run), *argv[1:], "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err
    assert [p.name for p in tmp_path.iterdir()] == (["out.file"] if existed else [])
    if existed:
        assert out.read_text() == "earlier output"
