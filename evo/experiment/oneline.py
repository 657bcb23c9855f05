"""Messages for a terminal: one line, with control characters escaped, whatever text from the user they quote
(a file name holding an escape sequence must not move the cursor, clear the screen or ring)."""

from __future__ import annotations

__all__ = ["one_line"]


def one_line(text: str) -> str:
    """`text` with runs of whitespace (newlines included) made one space and other unprintables escaped."""
    text = " ".join(text.split())
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)
