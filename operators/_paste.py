"""Real modules pasted into rendered ones: a kernel family written as one importable, testable Python file whose text
from a marker line on is copied verbatim into every module evo renders for that family (as evo/launch/runtime.py
is). Above the marker the file imports what the rendered module provides by then (torch, triton, the launch
runtime); below it is the code a user reads in an exported kernel, byte for byte."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["MARKER", "pasted_source", "constant"]

MARKER = "# ---- evo pastes this file from here on into every module it renders for this family ----"


@cache
def pasted_source(path: str | Path) -> str:
    """The text of the file at `path` after its MARKER line (the marker line included, so a reader of a rendered
    module sees where the pasted part starts). ValueError when the file has no such line."""
    text = Path(path).read_text()
    at = text.find("\n" + MARKER + "\n")
    if at < 0:
        raise ValueError(f"{path} has no line {MARKER!r} to paste from")
    return text[at + 1:].rstrip("\n") + "\n"


@cache
def constant(path: str | Path, name: str) -> Any:
    """The literal a real module assigns to `name` at its top level, read from its text without importing it (such a
    module imports torch and triton, which rendering and validating an experiment must not). ValueError when the
    file has no such assignment."""
    for node in ast.parse(Path(path).read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{path} assigns no literal to {name} at its top level")
