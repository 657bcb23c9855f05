"""Real evo kernels for a model's kernel plan, rendered from each operator's first seed genome and loaded as
evo.api.load returns them (torch ops calling the kernel), for the reference-layer tests in the Triton interpreter."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import operators
from evo.api import as_torch_op
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from evo.zoo import ModelSpec, layer_problems


def rendered(name: str, sizes: tuple[int, ...], dtype: str) -> Callable[..., Any]:
    """Operator `name` rendered for `sizes` in `dtype` from its first seed genome, as a torch op."""
    op = operators.get(name)
    problem = op.problem(sizes, dtype)
    source = op.render(op.family.seeds(problem, HOPPER)[0], problem, HOPPER)
    return as_torch_op(getattr(load_source(source), op.entry), op, tag=hashlib.sha256(source.encode()).hexdigest()[:16])


def plan_kernels(spec: ModelSpec, tokens: int, dtype: str, context: int, skip: tuple[str, ...] = ()
                 ) -> dict[str, Callable[..., Any]]:
    """Role -> an evo kernel for every searchable layer role of `spec`'s plan at `tokens` after `context` cached
    tokens (but the roles in `skip`)."""
    return {p.role: rendered(p.operator, p.sizes, dtype) for p in layer_problems(spec, [tokens], dtype, context)
            if p.scope == "layer" and p.searchable and p.role not in skip}
