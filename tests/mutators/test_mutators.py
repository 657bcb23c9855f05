"""Every mutator: valid children, seeded reproducibility, what each changes, settings checked up front."""

from __future__ import annotations

import numpy as np
import pytest

import evo.mutators as mutators
from evo.mutators import GroupCrossover, MultiGeneMutation, MutatorMix, PointMutation, UniformCrossover
from evo.problem import HOPPER, Problem
from genomes.gemm import GemmFamily

PROBLEMS = [Problem("gemm", (("M", 512), ("N", 512), ("K", 512)), "fp16"),
            Problem("gemm", (("M", 16), ("N", 4096), ("K", 4096)), "bf16"),
            Problem("gemm", (("M", 100), ("N", 72), ("K", 40)), "fp32")]  # odd sizes: no tensor descriptors


def parents(family, problem, rng, n):
    return [family.random(rng, problem, HOPPER) for _ in range(n)]


@pytest.mark.parametrize("name", mutators.names())
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.key)
def test_children_are_valid(name, problem):
    family = GemmFamily()
    m = mutators.get(name)
    rng = np.random.default_rng(7)
    changed = 0
    for _ in range(60):
        ps = parents(family, problem, rng, m.num_parents)
        child = m(ps, family, problem, HOPPER, rng)
        assert family.violations(child, problem, HOPPER) == []
        changed += all(child.hash != p.hash for p in ps)
    assert changed > 20  # variation actually varies


@pytest.mark.parametrize("name", mutators.names())
def test_seeded_reproducible(name):
    family, problem = GemmFamily(), PROBLEMS[0]

    def run(seed):
        rng = np.random.default_rng(seed)
        m = mutators.get(name)
        return [m(parents(family, problem, rng, m.num_parents), family, problem, HOPPER, rng).hash
                for _ in range(25)]

    assert run(1) == run(1)
    assert run(1) != run(2)


@pytest.mark.parametrize("name", mutators.names())
def test_pinned_genes_never_change(name):
    family = GemmFamily({"num_warps": [4], "memory": ["pointer"], "split_k": [1]})
    problem = PROBLEMS[0]
    m = mutators.get(name)
    rng = np.random.default_rng(3)
    for _ in range(40):
        child = m(parents(family, problem, rng, m.num_parents), family, problem, HOPPER, rng)
        assert (child["num_warps"], child["memory"], child["split_k"]) == (4, "pointer", 1)


def diff(a, b):
    return {k for k, v in a.as_dict().items() if b[k] != v}


def test_point_mutation_moves_one_gene_to_a_neighbour():
    family = GemmFamily()
    rng = np.random.default_rng(0)
    for _ in range(50):
        (p,) = parents(family, PROBLEMS[0], rng, 1)
        child = PointMutation().vary([p], family, rng)
        (gene,) = diff(p, child)
        assert child[gene] in family.genes[gene].neighbours(p[gene])


def test_multi_gene_mutation_moves_several():
    family = GemmFamily()
    rng = np.random.default_rng(0)
    m = MultiGeneMutation(min_genes=2, max_genes=3)
    for _ in range(50):
        (p,) = parents(family, PROBLEMS[0], rng, 1)
        child = m.vary([p], family, rng)
        assert 2 <= len(diff(p, child)) <= 3


def test_uniform_crossover_takes_each_gene_from_a_parent():
    family = GemmFamily()
    rng = np.random.default_rng(0)
    from_b = 0
    for _ in range(50):
        a, b = parents(family, PROBLEMS[0], rng, 2)
        child = UniformCrossover().vary([a, b], family, rng)
        assert all(child[k] in (a[k], b[k]) for k in family.genes)
        from_b += len(diff(a, child) & diff(a, b))
    assert from_b > 0


def test_group_crossover_moves_whole_groups():
    family = GemmFamily()
    rng = np.random.default_rng(0)
    for _ in range(50):
        a, b = parents(family, PROBLEMS[0], rng, 2)
        child = GroupCrossover().vary([a, b], family, rng)
        for genes in family.groups().values():
            assert all(child[g] == a[g] for g in genes) or all(child[g] == b[g] for g in genes)


def test_settings_and_arity_are_checked():
    with pytest.raises(ValueError, match="unknown mutator"):
        mutators.get("nope")
    with pytest.raises(ValueError, match="min_genes"):
        MultiGeneMutation(min_genes=0)
    with pytest.raises(ValueError, match="max_genes"):
        MultiGeneMutation(min_genes=3, max_genes=2)
    with pytest.raises(ValueError, match="swap_probability"):
        UniformCrossover(swap_probability=1.5)
    with pytest.raises(ValueError, match="swap_probability"):
        GroupCrossover(swap_probability=0)
    family, rng = GemmFamily(), np.random.default_rng(0)
    with pytest.raises(ValueError, match="takes 2 parent"):
        UniformCrossover()(parents(family, PROBLEMS[0], rng, 1), family, PROBLEMS[0], HOPPER, rng)
    assert [mutators.get(n).num_parents for n in ("mutate", "mutate_multi", "crossover_uniform",
                                                  "crossover_group")] == [1, 1, 2, 2]


def test_mix_draws_in_proportion_and_validates():
    mix = MutatorMix({"mutate": 3.0, "crossover_uniform": 1.0, "mutate_multi": 0.0})
    rng = np.random.default_rng(0)
    names = [mix.choose(rng).name for _ in range(4000)]
    assert "mutate_multi" not in names
    assert names.count("mutate") / len(names) == pytest.approx(0.75, abs=0.03)
    assert mix.max_parents == 2
    with pytest.raises(ValueError, match="non-negative"):
        MutatorMix({"mutate": -1.0})
    with pytest.raises(ValueError, match="positive weight"):
        MutatorMix({"mutate": 0.0})
    with pytest.raises(ValueError, match="unknown mutator"):
        MutatorMix({"bogus": 1.0})
    with pytest.raises(ValueError, match="settings given"):
        MutatorMix({"mutate": 1.0}, {"crossover_group": {"swap_probability": 0.3}})
    assert MutatorMix({"mutate_multi": 1.0}, {"mutate_multi": {"max_genes": 5}}).mutators[0].max_genes == 5
