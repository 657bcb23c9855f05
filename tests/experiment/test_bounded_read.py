"""Experiment files are refused by size before they are read: /dev/zero, a FIFO that never ends and a sparse
file of gigabytes all end in one line, in well under a second, with memory that stays flat."""

from __future__ import annotations

import os
import resource
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evo.experiment.bounded_read import TooLarge, read_text_bounded
from evo.experiment.config import ConfigError, load_experiment
from evo.experiment.limits import MAX_TEXT_BYTES


def _refused(path) -> str:
    t0 = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    assert time.monotonic() - t0 < 1
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 * 1024  # KiB: no file-sized buffer
    assert "\n" not in str(info.value)
    return str(info.value)


def test_dev_zero_is_refused_by_size():
    assert "is larger than 1024 KiB" in _refused("/dev/zero")


def test_a_huge_sparse_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "big.yaml"
    with open(path, "wb") as f:
        f.truncate(4 << 30)  # 4 GiB of holes: costs no disk, would cost 4 GiB of memory to read
    assert "is larger than 1024 KiB" in _refused(path)


def test_an_endless_fifo_is_refused_after_the_limit(tmp_path):
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    stop = threading.Event()

    def feed():
        with open(path, "wb") as f:
            try:
                while not stop.is_set():
                    f.write(b"a: 1\n" * 4096)
            except BrokenPipeError:  # the reader stopped at the limit
                pass

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        assert "is larger than 1024 KiB" in _refused(path)
    finally:
        stop.set()


@settings(max_examples=20, deadline=None)
@given(extra=st.integers(-3, 3))
def test_the_limit_is_exact(tmp_path_factory, extra):
    path = tmp_path_factory.mktemp("b") / "e.yaml"
    path.write_bytes(b"#" * (MAX_TEXT_BYTES + extra))
    if extra > 0:
        with pytest.raises(TooLarge):
            read_text_bounded(path, MAX_TEXT_BYTES)
    else:
        assert len(read_text_bounded(path, MAX_TEXT_BYTES)) == MAX_TEXT_BYTES + extra


def test_a_directory_and_a_missing_file_keep_their_messages(tmp_path):
    assert "is a directory" in _refused(tmp_path)
    assert "no such file" in _refused(tmp_path / "missing.yaml")
