"""write_atomic: the whole file or nothing. A write that fails halfway (a full disk, simulated by an os.write that
writes part of the bytes and then raises ENOSPC) leaves the earlier file untouched, or no file, and no temporary."""

from __future__ import annotations

import errno
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evo.store import atomic_file
from evo.store.atomic_file import write_atomic


def _disk_fills_after(monkeypatch, n_bytes: int) -> None:
    real = os.write
    budget = [n_bytes]

    def write(fd, data):
        if budget[0] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        wrote = real(fd, bytes(data[:budget[0]]))
        budget[0] -= wrote
        return wrote

    monkeypatch.setattr(atomic_file.os, "write", write)


def test_writes_text_and_bytes(tmp_path):
    write_atomic(tmp_path / "a.txt", "héllo")
    write_atomic(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "a.txt").read_text("utf-8") == "héllo" and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.bin"]


@settings(max_examples=30, deadline=None)
@given(size=st.integers(1, 200_000), fill=st.integers(0, 200_000), existed=st.booleans())
def test_a_full_disk_leaves_no_partial_file(tmp_path_factory, size, fill, existed):
    folder = tmp_path_factory.mktemp("w")
    target = folder / "report.html"
    if existed:
        target.write_text("old report")
    with pytest.MonkeyPatch.context() as mp:
        _disk_fills_after(mp, fill)
        if fill >= size:
            write_atomic(target, "x" * size)
        else:
            with pytest.raises(OSError) as info:
                write_atomic(target, "x" * size)
            assert info.value.errno == errno.ENOSPC
    names = [p.name for p in folder.iterdir()]
    assert names == (["report.html"] if existed or fill >= size else [])  # no temporary left behind
    if fill >= size:
        assert target.read_text() == "x" * size
    elif existed:
        assert target.read_text() == "old report"


def test_keeps_the_replaced_files_permissions(tmp_path):
    target = tmp_path / "k.py"
    target.write_text("old")
    target.chmod(0o640)
    write_atomic(target, "new")
    assert target.read_text() == "new" and (target.stat().st_mode & 0o777) == 0o640


def test_a_directory_in_the_way_fails_cleanly(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError):
        write_atomic(tmp_path / "d", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["d"]
