"""Rendered source becomes a module through a file named by its hash: the same source, the same file and
module; a module that fails to import leaves nothing behind."""

from __future__ import annotations

import sys

import pytest

from evo.evaluate.modules import load_source, source_hash, write_source


def test_same_source_same_file_and_module(tmp_path):
    src = "VALUE = 41 + 1\n"
    path = write_source(src, tmp_path)
    assert path.name == f"k_{source_hash(src)}.py" and write_source(src, tmp_path) == path
    first = load_source(src, tmp_path)
    assert first.VALUE == 42 and load_source(src, tmp_path) is first
    other = load_source("VALUE = 7\n", tmp_path)
    assert other is not first and other.VALUE == 7


def test_a_module_that_fails_to_import_is_not_kept(tmp_path):
    src = "raise RuntimeError('broken kernel module')\n"
    with pytest.raises(RuntimeError, match="broken"):
        load_source(src, tmp_path)
    assert f"evo_kernel_k_{source_hash(src)}" not in sys.modules


def test_a_damaged_file_is_rewritten(tmp_path):
    src = "VALUE = 1\n"
    path = write_source(src, tmp_path)
    path.write_text("VALUE = 2\n")
    assert write_source(src, tmp_path).read_text() == src
