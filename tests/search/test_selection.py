"""Parent selection and the variation step (first population, children that avoid duplicates)."""

from __future__ import annotations

import numpy as np
import pytest

from evo.archive import GridArchive, make_axes
from evo.experiment.spec import DescriptorSpec
from evo.mutators import MutatorMix
from evo.problem import HOPPER, Problem
from evo.search.selection import CuriositySelection, UniformSelection, get
from evo.search.variation import Variation
from evo.store.record import Evaluation
from genomes.gemm import GemmFamily

PROBLEM = Problem("gemm", (("M", 256), ("N", 256), ("K", 256)), "fp16")


def filled_archive(n=40, seed=0):
    family = GemmFamily()
    archive = GridArchive(make_axes(family, (DescriptorSpec("tile_area"), DescriptorSpec("num_warps"))),
                          lambda e: 1.0 / e.median_ms, 0.0)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        g = family.random(rng, PROBLEM, HOPPER)
        archive.add([Evaluation(operator="gemm", problem_key=PROBLEM.key, problem=PROBLEM.to_json(),
                                genome=g.canonical(), genome_hash=g.hash, source_hash=g.hash, status="ok",
                                median_ms=float(rng.uniform(1, 2)))])
    return family, archive


def test_uniform_and_curiosity_selection():
    family, archive = filled_archive()
    rng = np.random.default_rng(1)
    picks = [e.cell for _ in range(300) for e in UniformSelection().select(archive, 2, rng)]
    assert set(picks) <= {e.cell for e in archive.elites()}
    assert len(set(picks)) == len(archive)  # uniform reaches every elite
    newest = max(archive.elites(), key=lambda e: e.index)
    oldest = min(archive.elites(), key=lambda e: e.index)
    cur = CuriositySelection(half_life=4, floor=0.05)
    counts = [e.cell for _ in range(2000) for e in cur.select(archive, 1, rng)]
    assert counts.count(newest.cell) > 5 * max(1, counts.count(oldest.cell))
    with pytest.raises(ValueError, match="empty archive"):
        UniformSelection().select(GridArchive(archive.axes, archive.throughput_of), 1, rng)
    with pytest.raises(ValueError, match="unknown selection"):
        get("best")
    with pytest.raises(ValueError, match="half_life"):
        CuriositySelection(half_life=0)


def test_first_population_seeds_random_and_skips_seen():
    family = GemmFamily()
    var = Variation(family, PROBLEM, HOPPER, MutatorMix({"mutate": 1.0}), UniformSelection())
    first = var.initial(np.random.default_rng(0), 10)
    seeds = family.seeds(PROBLEM, HOPPER)
    assert [p.genome for p in first[:len(seeds)]] == seeds
    assert [p.origin for p in first].count("random") == 10
    assert len({p.genome.hash for p in first}) == len(first)
    again = var.initial(np.random.default_rng(0), 10, seen={first[0].genome.hash, first[-1].genome.hash})
    assert [p.genome for p in again] == [p.genome for p in first[1:-1]]


def test_first_population_takes_memory_seeds_and_transfer_in_turn():
    """Many elites of other shapes must not push the family's seeds behind them: a wall-clock budget may end
    after the first few evaluations."""
    family, archive = filled_archive(40)
    var = Variation(family, PROBLEM, HOPPER, MutatorMix({"mutate": 1.0}), UniformSelection())
    elites = archive.elites()
    first = var.initial(np.random.default_rng(0), 2, transfer=elites[3:], memory=elites[:3])
    seeds = family.seeds(PROBLEM, HOPPER)
    origins = [p.origin for p in first]
    assert origins[:3] == ["memory", "seed", "transfer"]
    assert origins[3 * 3:3 * 3 + 2] == ["seed", "transfer"]  # memory (3) ran out; the other two go on in turn
    assert [p.genome for p in first if p.origin == "seed"] == seeds
    assert origins.count("transfer") <= len(elites) - 3 and origins[-2:] == ["random", "random"]


def test_children_avoid_genomes_already_seen():
    family, archive = filled_archive(30)
    var = Variation(family, PROBLEM, HOPPER, MutatorMix({"mutate": 1.0, "crossover_uniform": 1.0}),
                    UniformSelection())
    rng = np.random.default_rng(5)
    seen = {e.genome_hash for e in archive.elites()}
    for _ in range(100):
        p = var.child(archive, seen, rng)
        assert p.genome.hash not in seen and family.violations(p.genome, PROBLEM, HOPPER) == []
        assert p.origin in ("mutate", "crossover_uniform", "random")
        assert p.parents or p.origin == "random"
        seen.add(p.genome.hash)


def test_child_of_an_exhausted_space_is_accepted():
    family = GemmFamily({k: [v] for k, v in GemmFamily().base().items()})  # one genome only
    var = Variation(family, PROBLEM, HOPPER, MutatorMix({"mutate": 1.0}), UniformSelection(), redraws=3)
    archive = GridArchive(make_axes(family, ()), lambda e: 1.0, 0.0)
    only = family.make(family.base())
    p = var.child(archive, {only.hash}, np.random.default_rng(0))
    assert p.genome == only


def test_children_read_each_parent_once_and_are_the_same(monkeypatch):
    """Variation keeps parents read back from their text: the same children, one coerce per distinct parent."""
    from evo.search import variation as variation_module

    family, archive = filled_archive(30)
    mix = MutatorMix({"mutate": 1.0, "crossover_uniform": 1.0})

    def children(var):
        rng, seen = np.random.default_rng(7), set()
        return [var.child(archive, seen, rng) for _ in range(60)]

    cached = Variation(family, PROBLEM, HOPPER, mix, UniformSelection())
    plain = Variation(family, PROBLEM, HOPPER, mix, UniformSelection())
    monkeypatch.setattr(plain, "_parent", lambda text: variation_module.coerce(family, text))  # read every time
    calls = []
    real = variation_module.coerce
    monkeypatch.setattr(variation_module, "coerce", lambda fam, text: calls.append(text) or real(fam, text))
    got = children(cached)
    assert len(calls) == len(set(calls)) <= len(archive)  # each parent read once
    monkeypatch.setattr(variation_module, "coerce", real)
    assert got == children(plain)
