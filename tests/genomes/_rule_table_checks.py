"""Checks every genome family with a rule table (genomes/rule_table.py) must pass: its seeds and random draws keep
every rule (soft ones too), repair moves any drawn gene assignment inside the rules, and violations() is exactly the
table's hard checks."""

from __future__ import annotations

import numpy as np

from genomes.base import InvalidGenome
from genomes.rule_table import reasons, table_violations


def check_rule_table(family, rules, problem, target, draws: int = 200, seed: int = 0) -> dict[str, int]:
    """Runs the checks; returns how often each rule was broken by a raw uniform draw (so a caller can assert that
    the draws exercised the rules)."""
    rng = np.random.default_rng(seed)
    seeds = family.seeds(problem, target)
    assert seeds, f"no seeds for {problem.key}"
    assert len({g.hash for g in seeds}) == len(seeds)
    for g in seeds:
        assert table_violations(rules, g.as_dict(), problem, target, soft=True) == [], (problem.key, str(g))
    broken = {rule.name: 0 for rule in rules}
    for _ in range(draws):
        raw = family.make({name: gene.random(rng) for name, gene in family.genes.items()})
        values = raw.as_dict()
        assert family.violations(raw, problem, target) == table_violations(rules, values, problem, target)
        for rule in rules:
            broken[rule.name] += bool(reasons(rule, values, problem, target, soft=True))
        try:
            fixed = family.repair(raw, problem, target, rng)
        except InvalidGenome:
            continue
        assert table_violations(rules, fixed.as_dict(), problem, target, soft=True) == [], (str(raw), str(fixed))
        assert family.repair(fixed, problem, target, rng) == fixed  # a genome inside every rule is left as it is
        drawn = family.random(rng, problem, target)
        assert table_violations(rules, drawn.as_dict(), problem, target, soft=True) == []
    return broken
