"""Helpers for writing generated source: indented template pieces and wrapped argument lists."""

from __future__ import annotations

import textwrap

__all__ = ["block", "wrap"]


def block(text: str, depth: int) -> str:
    """Dedent a template piece and indent it `depth` levels (4 spaces each)."""
    return textwrap.indent(textwrap.dedent(text).strip("\n"), "    " * depth) + "\n"


def wrap(items: list[str], width: int = 96) -> list[str]:
    """Comma-separated lines of `items`, each line at most about `width` characters, each ending in a comma."""
    lines, line = [], ""
    for item in items:
        if line and len(line) + len(item) + 2 > width:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {item}" if line else item
    return lines + [line + ","] if line else lines
