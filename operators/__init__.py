"""Operators evo can search, by name. Modules are imported only when asked for."""

from __future__ import annotations

import importlib
from typing import Any

from operators.base import Baseline, Operator

__all__ = ["Operator", "Baseline", "get", "names"]

_REGISTRY = {
    "gemm": "operators.gemm:GemmOperator",
    "softmax": "operators.softmax:SoftmaxOperator",
    "rmsnorm": "operators.rmsnorm:RMSNormOperator",
}


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str, overrides: dict[str, list[Any]] | None = None) -> Operator:
    """An operator instance by registry name; `overrides` restricts its genes' domains."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown operator {name!r}; known operators: {', '.join(names())}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), cls)(overrides)
