"""Helpers for writing generated source: template files (Jinja), indented template pieces and wrapped argument
lists."""

from __future__ import annotations

import textwrap
from functools import cache
from pathlib import Path
from typing import Any

__all__ = ["block", "wrap", "jit_def", "render_template"]


@cache
def _environment(folder: str) -> Any:
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(folder), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def render_template(path: str | Path, **context: Any) -> str:
    """The Jinja template file at `path` rendered with `context` (a name it uses but is not given raises: strict;
    block tags take their whole line, so a template reads like the code it writes)."""
    path = Path(path)
    return _environment(str(path.parent)).get_template(path.name).render(**context)


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


def jit_def(name: str, params: list[str], width: int = 110) -> list[str]:
    """The `@triton.jit` line and a `def name(params):` wrapped at about `width` characters, continuation lines
    aligned under the first parameter."""
    lines, line = [], f"def {name}("
    for i, p in enumerate(params):
        piece = p + (", " if i < len(params) - 1 else "):")
        if len(line) + len(piece.rstrip()) > width:
            lines.append(line.rstrip())
            line = " " * (len(name) + 5)
        line += piece
    return ["@triton.jit"] + lines + [line]
