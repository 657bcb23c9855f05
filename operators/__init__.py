"""Operators evo can search, found through the `evo.operators` entry-point group.

Every operator, built-in or not, is registered the same way: a package declares
`[project.entry-points."evo.operators"] NAME = "module:OperatorClass"` in its pyproject (evo's own four are in
evo's), and `get(NAME)` imports the module only when the operator is asked for. A separate package can add an
operator without editing evo.
"""

from __future__ import annotations

import functools
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from operators.base import Baseline, Operator

__all__ = ["Operator", "Baseline", "GROUP", "get", "names"]

GROUP = "evo.operators"
VARIANTS = "evo.operator_variants"  # name -> factory(options, overrides) of `<name>+<option>+...` operators


def _registered() -> dict[str, EntryPoint]:
    """The registered operators by name. Reading the entry points reads every installed package's metadata from
    disk (about 20 ms), so it is read once per sys.path (a package put on the path is found): a command that asks
    for the operator of each of 10,000 problems would spend minutes there."""
    return dict(_registered_on(tuple(sys.path)))


@functools.lru_cache(maxsize=8)
def _registered_on(path: tuple[str, ...]) -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in found and found[ep.name].value != ep.value:
            raise ValueError(f"operator {ep.name!r} is registered twice ({found[ep.name].value} and {ep.value}) "
                             f"in the {GROUP!r} entry points")
        found.setdefault(ep.name, ep)
    return found


def names() -> list[str]:
    return sorted(_registered())


def get(name: str, overrides: dict[str, list[Any]] | None = None) -> Operator:
    """An operator instance by name; `overrides` restricts its genes' domains.

    A name is a registered operator, optionally followed by options after "+" that the factory registered for
    it in the `evo.operator_variants` group understands (`gemm+bias+gelu`: the GEMM with a fused epilogue,
    operators/gemm/variants.py); ValueError names what is wrong."""
    registered = _registered()
    base, *options = name.split("+")
    if base not in registered:
        known = ", ".join(sorted(registered)) or f"none (is evo installed? its {GROUP} entry points are missing)"
        raise ValueError(f"unknown operator {base!r}; known operators: {known}")
    if options:
        variants = {ep.name: ep for ep in entry_points(group=VARIANTS)}
        if base not in variants:
            raise ValueError(f"operator {base!r} takes no options after '+'; got {name!r}")
        operator = variants[base].load()(tuple(options), overrides)
    else:
        operator = registered[base].load()(overrides)
    if not isinstance(operator, Operator) or operator.name != name:
        raise ValueError(f"entry point {base!r} ({registered[base].value}) does not make an Operator named {name!r}")
    return operator
