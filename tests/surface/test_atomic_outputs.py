"""`evo report` and `evo export` onto a full disk: one line, exit 2, and no truncated file (the old one stays); onto
a device, a FIFO or a link loop: one line, exit 2, and the special file is left as it was; through a link to a
regular file: the file is written and the link stays."""

from __future__ import annotations

import errno
import os
import stat

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


COMMANDS = [["report"], ["export", "--shape", "64x64x64"], ["export", "--all"]]


def _special(tmp_path, kind):
    path = tmp_path / "out.file"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":  # a /dev/full of its own (major 1, minor 7): never the machine's
        if os.geteuid() != 0:
            pytest.skip("making a device node needs root")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    elif kind == "link loop":
        os.symlink("other", path)
        os.symlink("out.file", tmp_path / "other")
    elif kind == "link to a device":
        os.symlink("/dev/null", path)
    return path


@pytest.mark.parametrize("argv", COMMANDS)
@pytest.mark.parametrize("kind", ["fifo", "device", "link loop", "link to a device"])
def test_a_special_output_path_is_refused_in_one_line(run, tmp_path, capsys, argv, kind):
    out = _special(tmp_path, kind)
    before = {p.name: (os.lstat(p).st_mode, os.readlink(p) if p.is_symlink() else None) for p in tmp_path.iterdir()}
    assert main([argv[0], str(run), *argv[1:], "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and "Traceback" not in err
    after = {p.name: (os.lstat(p).st_mode, os.readlink(p) if p.is_symlink() else None) for p in tmp_path.iterdir()}
    assert after == before  # the special file (or link) is still there, as it was


@pytest.mark.parametrize("argv", COMMANDS)
def test_a_link_to_a_file_is_written_through(run, tmp_path, capsys, argv):
    (tmp_path / "real.out").write_text("earlier output")
    os.symlink("real.out", tmp_path / "link.out")
    assert main([argv[0], str(run), *argv[1:], "-o", str(tmp_path / "link.out")]) == 0
    assert (tmp_path / "link.out").is_symlink() and os.readlink(tmp_path / "link.out") == "real.out"
    assert (tmp_path / "real.out").read_text() != "earlier output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.out", "real.out"]
