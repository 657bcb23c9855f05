"""The L2 flush used between timed runs (the timing itself needs a GPU: tests/gpu)."""

import pytest
import torch

from evo.evaluate import timing


def test_read_flush_reads_the_whole_buffer_and_writes_nothing_of_it():
    flush = timing._flusher("cpu", 1 << 12, "read")
    buf = timing._FLUSH[("cpu", 1 << 12)]
    before = buf.clone()
    total = flush()
    assert int(total) == buf.numel()  # a sum of ones: every element was read
    assert torch.equal(buf, before)


def test_write_flush_is_a_memset():
    flush = timing._flusher("cpu", 1 << 13, "write")
    flush()
    assert int(timing._FLUSH[("cpu", 1 << 13)].abs().sum()) == 0


def test_unknown_flush_mode_is_named():
    with pytest.raises(ValueError, match="'none'"):
        timing._flusher("cpu", 1 << 12, "none")
