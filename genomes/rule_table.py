"""One rule table per genome family: each rule states a check and its fix once, and a family's `violations()` and
`repair()` both read the same table, so the two cannot drift apart.

A rule's `check(g, problem, target)` returns the reason a gene assignment breaks it (None when it holds); its
`fix(family, g, problem, target)` moves genes of the mutable assignment `g` towards holding it and returns False when
it can move no further (a restricted domain, a gene at its end). Repair walks the table in order, applying each fix
until its rule holds or the fix gives up, and goes round the table again while a later fix broke an earlier rule
(bounded), so the order of the table is the order of priorities: earlier rules are settled first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evo.problem import Problem, Target

__all__ = ["Rule", "table_violations", "table_repair"]

Check = Callable[[Mapping[str, Any], Problem, Target], "str | None"]
Fix = Callable[[Any, dict[str, Any], Problem, Target], bool]


@dataclass(frozen=True)
class Rule:
    """A validity rule of a genome family: a name (for tests and messages), its check and its fix."""

    name: str
    check: Check
    fix: Fix


def table_violations(rules: Sequence[Rule], g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """The reasons, in table order, that gene values `g` break the rules (empty when they hold them all)."""
    return [reason for rule in rules if (reason := rule.check(g, problem, target)) is not None]


def table_repair(family: Any, rules: Sequence[Rule], g: dict[str, Any], problem: Problem, target: Target,
                 rounds: int = 4, steps: int = 64) -> dict[str, Any]:
    """`g` moved in place by the rules' fixes until every rule holds or no fix moves it further; returns `g` (the
    caller checks what is left, e.g. with GenomeFamily._repaired)."""
    for _ in range(rounds):
        for rule in rules:
            for _ in range(steps):
                if rule.check(g, problem, target) is None or not rule.fix(family, g, problem, target):
                    break
        if not table_violations(rules, g, problem, target):
            break
    return g
