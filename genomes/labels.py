"""Tick labels for behaviour descriptors, in the units people think in: a tile is 128×256, not log2 = 15; a
structure is "TMA+persistent", not 3. A descriptor's value stays what the archive bins on; its label is only
what a report prints for a bin's lower edge."""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["power_of_two", "tile", "categories"]


def _int(v: float) -> int:
    return int(round(v))


def power_of_two(v: float) -> str:
    """log2 value -> the power of two: 6 -> "64"."""
    return f"{2 ** v:g}" if v != _int(v) else str(2 ** _int(v))


def tile(v: float) -> str:
    """log2 of a tile's area -> its squarest power-of-two sides: 15 -> "128×256"."""
    if v != _int(v) or v < 0:
        return f"area {2 ** v:g}"
    n = _int(v)
    return f"{2 ** (n // 2)}×{2 ** (n - n // 2)}"


def categories(names: Sequence[str]) -> Callable[[float], str]:
    """An index -> its name (a value between names keeps its number)."""
    def label(v: float) -> str:
        i = _int(v)
        return names[i] if v == i and 0 <= i < len(names) else f"{v:g}"
    return label
