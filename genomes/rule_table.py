"""One rule table per genome family: each rule states a check and its fix once, and a family's `violations()` and
`repair()` both read the same table, so the two cannot drift apart.

A rule's `check(g, problem, target)` returns the reason a gene assignment breaks it (None when it holds); its
`fix(family, g, problem, target)` moves genes of the mutable assignment `g` towards holding it and returns False when
it can move no further (a restricted domain, a gene at its end). Repair walks the table in order, applying each fix
until its rule holds or the fix gives up, and goes round the table again while a later fix broke an earlier rule
(bounded), so the order of the table is the order of priorities: earlier rules are settled first.

A rule is hard (the kernel cannot run, or runs wrong or spilled: a violation) or soft (the kernel runs right but
wastes work, e.g. a block wider than the row). Soft rules are no violations, so a genome stays valid for a smaller
problem of its operator (an elite transferred between shapes, the smoke mode's clipped problems); repair, and so
random draws and seeds, follows them too, so what a search proposes is sensible.
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
    """A rule of a genome family: a name (for tests and messages), its check and its fix; `hard` says that breaking it
    makes the genome invalid (else the rule only steers repair away from waste)."""

    name: str
    check: Check
    fix: Fix
    hard: bool = True


def table_violations(rules: Sequence[Rule], g: Mapping[str, Any], problem: Problem, target: Target,
                     soft: bool = False) -> list[str]:
    """The reasons, in table order, that gene values `g` break the hard rules (and the soft ones with `soft`); empty
    when they hold them all."""
    return [reason for rule in rules if (rule.hard or soft) and (reason := rule.check(g, problem, target)) is not None]


def table_repair(family: Any, rules: Sequence[Rule], g: dict[str, Any], problem: Problem, target: Target,
                 rounds: int = 4, steps: int = 64) -> dict[str, Any]:
    """`g` moved in place by the rules' fixes (soft rules' too) until every rule holds or no fix moves it further;
    returns `g` (the caller checks what is left of the hard rules, e.g. with GenomeFamily._repaired)."""
    for _ in range(rounds):
        for rule in rules:
            for _ in range(steps):
                if rule.check(g, problem, target) is None or not rule.fix(family, g, problem, target):
                    break
        if not table_violations(rules, g, problem, target, soft=True):
            break
    return g
