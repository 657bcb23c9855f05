"""write_atomic: the whole file or nothing. A write that fails halfway (a full disk, simulated by an os.write that
writes part of the bytes and then raises ENOSPC) leaves the earlier file untouched, or no file, and no temporary.
A link is written through to its regular file; a device, FIFO, socket, directory or link loop is refused, never
replaced."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evo.store import atomic_file
from evo.store.atomic_file import NotARegularFile, write_atomic


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


# -- what sits at the path: a link is written through to its regular file, anything else is refused, never replaced

def _tree(folder):
    """Every name in `folder` with what it is (and a link's target), to compare before and after."""
    out = {}
    for p in sorted(folder.iterdir()):
        mode = os.lstat(p).st_mode
        out[p.name] = ("link", os.readlink(p)) if stat.S_ISLNK(mode) else (stat.S_IFMT(mode), None)
    return out


def _fifo(p):
    os.mkfifo(p)


def _socket(p):
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def _char_device(p):  # a /dev/full of its own: major 1, minor 7 (root only)
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 7))


SPECIAL = {"fifo": (_fifo, "a FIFO"), "socket": (_socket, "a socket"), "device": (_char_device, "a character device"),
           "directory": (lambda p: p.mkdir(), "a directory")}


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("through_link", [False, True])
def test_a_special_file_is_refused_never_replaced(tmp_path, kind, through_link):
    make, what = SPECIAL[kind]
    special = tmp_path / "special"
    make(special)
    path = tmp_path / "out" if through_link else special
    if through_link:
        os.symlink("special", path)
    before = _tree(tmp_path)
    with pytest.raises(NotARegularFile) as info:
        write_atomic(path, "x")
    assert what in info.value.strerror and "\n" not in info.value.strerror
    assert _tree(tmp_path) == before  # nothing replaced, no temporary left


def test_a_link_loop_is_refused(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(NotARegularFile, match="loop"):
        write_atomic(tmp_path / "a", "x")
    assert _tree(tmp_path) == {"a": ("link", "b"), "b": ("link", "a")}


def test_a_dangling_link_into_a_missing_folder_is_refused(tmp_path):
    os.symlink(tmp_path / "gone" / "k.py", tmp_path / "k.py")
    with pytest.raises(NotARegularFile, match="folder does not exist"):
        write_atomic(tmp_path / "k.py", "x")
    assert [p.name for p in tmp_path.iterdir()] == ["k.py"]


@pytest.mark.parametrize("path", ["/dev/stdout", "/proc/self/fd/1"])
def test_a_link_to_an_open_descriptor_is_refused(path):
    with pytest.raises(NotARegularFile, match="open file descriptor"):
        write_atomic(path, "x")


@settings(max_examples=60, deadline=None)
@given(hops=st.integers(1, 6), end=st.sampled_from(["file", "free", "fifo", "directory", "loop", "missing folder"]),
       relative=st.booleans())
def test_a_chain_of_links_writes_its_file_or_changes_nothing(tmp_path_factory, hops, end, relative):
    """Whatever a chain of links ends in: a regular file (or a free name) gets the bytes and every link stays;
    anything else is refused and the folder is as it was."""
    folder = tmp_path_factory.mktemp("chain")
    names = [f"l{i}" for i in range(hops)]
    last = {"file": "end", "free": "end", "fifo": "end", "directory": "end", "loop": names[0],
            "missing folder": "gone/end"}[end]
    for name, nxt in zip(names, [*names[1:], last], strict=True):
        os.symlink(nxt if relative else folder / nxt, folder / name)
    if end == "file":
        (folder / "end").write_text("old")
    elif end == "fifo":
        os.mkfifo(folder / "end")
    elif end == "directory":
        (folder / "end").mkdir()
    before = _tree(folder)
    if end in ("file", "free"):
        write_atomic(folder / names[0], "new")
        assert (folder / "end").read_text() == "new" and stat.S_ISREG(os.lstat(folder / "end").st_mode)
        assert {k: v for k, v in _tree(folder).items() if k != "end"} == {k: v for k, v in before.items()
                                                                           if k != "end"}
    else:
        with pytest.raises(NotARegularFile):
            write_atomic(folder / names[0], "new")
        assert _tree(folder) == before
