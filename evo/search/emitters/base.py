"""Emitters: the ways a search proposes its next kernel, and the registry that names them.

Several emitters share one archive (as in pyribs): each proposes children its own way, and a scheduler
(evo.search.emitters.scheduler) decides which one proposes next from the archive improvements each caused.
An emitter is built from its YAML settings alone (validated in `__init__`, so a bad setting fails before any
work starts) and gets everything else per proposal in an `EmitContext`.

This module sits below evo.archive and evo.search.variation: the archive and the variation are duck-typed
here (`archive.elites()`, `variation.child(...)`, `variation.random_child(...)`).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from evo.problem import Problem
from evo.store.record import Evaluation

__all__ = ["Emitter", "EmitContext", "DEFAULT_EMITTERS", "get", "names", "INITIAL"]

INITIAL = "initial"  # the `emitter` of a problem's first population (transfer, memory, seeds, random)
DEFAULT_EMITTERS: tuple[str, ...] = ("variation", "guided", "exploit", "restart")

_REGISTRY = {
    "variation": "evo.search.emitters.blind:VariationEmitter",
    "exploit": "evo.search.emitters.blind:ExploitEmitter",
    "restart": "evo.search.emitters.blind:RestartEmitter",
    "guided": "evo.search.emitters.guided:GuidedEmitter",
}


@dataclass
class EmitContext:
    """What an emitter may use to propose one child for `problem`."""

    problem: Problem
    archive: Any  # evo.archive.GridArchive of the problem
    variation: Any  # evo.search.variation.Variation of the problem
    seen: set[str]  # genome hashes already evaluated or in flight: never proposed again if avoidable
    rng: np.random.Generator
    rows: Callable[[], list[Evaluation]] = field(default=lambda: [])  # training rows (learned emitters)
    seed: int = 0


class Emitter(ABC):
    name: ClassVar[str] = ""

    @abstractmethod
    def propose(self, ctx: EmitContext) -> Any:
        """One proposal (evo.search.variation.Proposal) not in `ctx.seen` when that can be avoided."""

    def describe(self) -> str:
        """A line for the run's log: what this emitter does with which settings."""
        settings = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{self.name}({settings})"


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str, settings: Mapping[str, Any] | None = None) -> Emitter:
    """An emitter by registry name, built with `settings` (ValueError on an unknown name or a bad setting)."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown emitter {name!r}; known: {', '.join(names())}")
    module, cls = _REGISTRY[name].split(":")
    try:
        return getattr(importlib.import_module(module), cls)(**dict(settings or {}))
    except TypeError as e:  # an unknown setting
        raise ValueError(f"emitter {name}: {e}") from None
