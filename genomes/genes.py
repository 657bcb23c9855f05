"""Typed genes with finite, ordered domains.

A gene knows its domain, how to draw a value, and which values are its neighbours (the moves a mutation
may make). Ordered genes (powers of two, integers) neighbour the adjacent values; categorical genes
neighbour every other value. Genes are immutable; `restrict` returns a narrower copy for experiments
that pin or prune a gene.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

__all__ = ["Gene", "PowerOfTwo", "IntChoice", "Categorical", "Boolean"]


@dataclass(frozen=True)
class Gene:
    """A named parameter with a finite domain. `group` names the gene group used by crossover."""

    name: str
    values: tuple[Any, ...]
    group: str = "misc"
    ordered: bool = True
    doc: str = ""
    # (value,) for a gene added after genomes were stored: the value those genomes held without naming it. A
    # genome at that value leaves the gene out of its canonical encoding, so its hash (its identity in stores,
    # archives and exported kernels) stays what it was, and a stored genome without the gene reads back as it.
    implied: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"gene {self.name!r} has an empty domain")
        if len(set(self.values)) != len(self.values):
            raise ValueError(f"gene {self.name!r} has repeated values: {self.values}")
        if len(self.implied) > 1:
            raise ValueError(f"gene {self.name!r}: implied {self.implied} is not one value")

    def check(self, value: Any) -> None:
        if value not in self.values:
            raise ValueError(f"gene {self.name!r}: {value!r} is not one of {list(self.values)}")

    def random(self, rng: np.random.Generator) -> Any:
        return self.values[int(rng.integers(len(self.values)))]

    def neighbours(self, value: Any) -> tuple[Any, ...]:
        """Values one mutation step away from `value` (never `value` itself)."""
        self.check(value)
        if not self.ordered:
            return tuple(v for v in self.values if v != value)
        i = self.values.index(value)
        return tuple(self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values))

    def nearest(self, value: Any) -> Any:
        """The domain value closest to `value` (used by repair after a domain is restricted)."""
        if value in self.values:
            return value
        if self.ordered and all(isinstance(v, (int, float)) for v in self.values):
            return min(self.values, key=lambda v: (abs(v - value), v))
        return self.values[0]

    def restrict(self, values: list[Any] | tuple[Any, ...]) -> Gene:
        """A copy whose domain is `values`, which must all belong to the current domain. The implied value stays
        as it is, in the domain or not: stored genomes without the gene still read back as they were (and, outside
        the domain, are out of this run's space, as any stored genome with a value it excludes)."""
        bad = [v for v in values if v not in self.values]
        if bad:
            raise ValueError(f"gene {self.name!r}: {bad} not in its domain {list(self.values)}")
        return replace(self, values=tuple(v for v in self.values if v in values))


def PowerOfTwo(name: str, low: int, high: int, group: str = "misc", doc: str = "") -> Gene:
    if low <= 0 or low & (low - 1) or high & (high - 1) or high < low:
        raise ValueError(f"gene {name!r}: bounds {low}..{high} are not powers of two in order")
    values = []
    v = low
    while v <= high:
        values.append(v)
        v *= 2
    return Gene(name, tuple(values), group=group, ordered=True, doc=doc)


def _defined(gene: Gene) -> Gene:
    """`gene` as a family defines it: its implied value, if any, is one of its values (a restriction may drop it)."""
    if gene.implied and gene.implied[0] not in gene.values:
        raise ValueError(f"gene {gene.name!r}: implied {gene.implied} is not one value of its domain")
    return gene


def IntChoice(name: str, values: list[int] | tuple[int, ...], group: str = "misc", doc: str = "",
              implied: tuple[Any, ...] = ()) -> Gene:
    return _defined(Gene(name, tuple(sorted(values)), group=group, ordered=True, doc=doc, implied=implied))


def Categorical(name: str, values: list[Any] | tuple[Any, ...], group: str = "misc", doc: str = "",
                implied: tuple[Any, ...] = ()) -> Gene:
    return _defined(Gene(name, tuple(values), group=group, ordered=False, doc=doc, implied=implied))


def Boolean(name: str, group: str = "misc", doc: str = "", implied: tuple[Any, ...] = ()) -> Gene:
    return _defined(Gene(name, (False, True), group=group, ordered=False, doc=doc, implied=implied))
