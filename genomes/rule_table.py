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
random draws and seeds, follows them too, so what a search proposes is sensible. A hard rule may also `steer`: name
what a valid genome still moves for (its sensible form), which its fix settles but violations() does not report.

A check may name several reasons (a list) where one fix settles them together. A family whose repair settles its
rules in another order than it reports them (or looks at some twice, after later fixes moved genes they read) walks a
`plan`, the rules' names in the order repair settles them, once (`plan_repair`); a fix that decides once (a coin
between two structures) returns False, so it is applied once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evo.problem import Problem, Target

__all__ = ["Rule", "FromTable", "Check", "Fix", "Domains", "reasons", "holds", "table_violations", "table_repair",
           "plan_repair", "region_repair", "unmovable", "steering", "domains", "outside"]

Check = Callable[[Mapping[str, Any], Problem, Target], "str | Sequence[str] | None"]
Fix = Callable[[Any, dict[str, Any], Problem, Target], bool]
Domains = tuple[tuple[str, tuple[Any, ...]], ...]  # (gene, its values) of a family, restricted or not


@dataclass(frozen=True)
class Rule:
    """A rule of a genome family: a name (for tests and messages), its check and its fix; `hard` says that breaking it
    makes the genome invalid (else the rule only steers repair away from waste)."""

    name: str
    check: Check
    fix: Fix
    hard: bool = True
    steer: Check | None = None  # what a valid genome still moves for: a hard rule's soft side


def reasons(rule: Rule, g: Mapping[str, Any], problem: Problem, target: Target, soft: bool = False) -> list[str]:
    """Why gene values `g` break `rule` (its steering and soft reasons too with `soft`); empty when it holds."""
    out = _listed(rule.check(g, problem, target)) if rule.hard or soft else []
    if soft and rule.steer is not None:
        out += _listed(rule.steer(g, problem, target))
    return out


def holds(rule: Rule, g: Mapping[str, Any], problem: Problem, target: Target) -> bool:
    """Whether `g` keeps `rule`, soft side and steering included (repair's test)."""
    return not reasons(rule, g, problem, target, soft=True)


def steering(rules: Sequence[Rule], g: Mapping[str, Any], problem: Problem, target: Target) -> list[str]:
    """What moves gene values `g` that keep the hard rules: the soft rules' reasons and the hard rules' steering."""
    out = []
    for rule in rules:
        if not rule.hard:
            out += _listed(rule.check(g, problem, target))
        if rule.steer is not None:
            out += _listed(rule.steer(g, problem, target))
    return out


def _listed(found: str | Sequence[str] | None) -> list[str]:
    return [] if found is None else [found] if isinstance(found, str) else list(found)


def table_violations(rules: Sequence[Rule], g: Mapping[str, Any], problem: Problem, target: Target,
                     soft: bool = False) -> list[str]:
    """The reasons, in table order, that gene values `g` break the hard rules (and the soft ones with `soft`); empty
    when they hold them all."""
    return [reason for rule in rules for reason in reasons(rule, g, problem, target, soft)]


def table_repair(family: Any, rules: Sequence[Rule], g: dict[str, Any], problem: Problem, target: Target,
                 rounds: int = 4, steps: int = 64) -> dict[str, Any]:
    """`g` moved in place by the rules' fixes (soft rules' too) until every rule holds or no fix moves it further;
    returns `g` (the caller checks what is left of the hard rules, e.g. with GenomeFamily._repaired)."""
    for _ in range(rounds):
        for rule in rules:
            for _ in range(steps):
                if holds(rule, g, problem, target) or not rule.fix(family, g, problem, target):
                    break
        if not table_violations(rules, g, problem, target, soft=True):
            break
    return g


def plan_repair(family: Any, rules: Sequence[Rule], plan: Sequence[str], g: dict[str, Any], problem: Problem,
                target: Target, steps: int = 64) -> dict[str, Any]:
    """`g` moved in place by the fixes of the rules `plan` names, in its order, once: each fix applied until its rule
    holds or the fix gives up; returns `g` (the caller checks what is left of the hard rules)."""
    by_name = {rule.name: rule for rule in rules}
    unknown = [name for name in plan if name not in by_name]
    if unknown:
        raise ValueError(f"repair plan names rules {unknown} the table does not have")
    for name in plan:
        rule = by_name[name]
        for _ in range(steps):
            if holds(rule, g, problem, target) or not rule.fix(family, g, problem, target):
                break
    return g


def region_repair(family: Any, rules: Sequence[Rule], plan: Sequence[str], g: dict[str, Any], problem: Problem,
                  target: Target) -> bool:
    """Move `g` in place into a region (a rendering's rules, e.g. the Gluon backend's): the fixes of the rules `plan`
    names, in its order, each once, whether its rule holds or not (a fix that finds its rule holding moves nothing);
    False at the first fix that cannot settle its rule (the rest do not run): the genome leaves the region, the
    caller says how."""
    by_name = {rule.name: rule for rule in rules}
    return all(by_name[name].fix(family, g, problem, target) for name in plan)


def unmovable(check: Check) -> Fix:
    """The fix of a rule with check `check` that no gene moves settle (the problem's or the target's own, or one that
    another rule's fix settles): it moves nothing, and settles the rule only where it holds (in a region: a genome
    that breaks it leaves)."""
    return lambda family, g, problem, target: not _listed(check(g, problem, target))


def domains(family: Any) -> Domains:
    """The (possibly restricted) domains of `family`'s genes, hashable (a key for a family's cached table)."""
    return tuple((name, gene.values) for name, gene in sorted(family.genes.items()))


def outside(family_domains: Domains, g: Mapping[str, Any]) -> list[str]:
    """The genes of `g` holding values outside `family_domains`: a genome of a run restricted otherwise (a transferred
    elite). A fix that moves genes within their domains cannot hold such a gene where it is: a rule whose fix settles
    several genes at once steers on these, so that the fix runs (and moves them, or gives up) for such a genome."""
    return [f"{name}={g[name]!r} is outside this family's domain" for name, values in family_domains
            if g[name] not in values]


class FromTable:
    """Mixin for a genome family (before GenomeFamily in its bases) whose `rules` are its one table: `violations()`
    and `repair()` read it."""

    def violations(self, genome: Any, problem: Problem, target: Target) -> list[str]:
        return table_violations(self.rules, genome.as_dict(), problem, target)  # type: ignore[attr-defined]

    def repair(self, genome: Any, problem: Problem, target: Target, rng: Any) -> Any:
        g = table_repair(self, self.rules, genome.as_dict(), problem, target)  # type: ignore[attr-defined]
        return self._repaired(g, genome, problem, target)  # type: ignore[attr-defined]
