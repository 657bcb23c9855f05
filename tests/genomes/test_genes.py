"""Typed genes: domains, random draws, neighbours, nearest values and restriction."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from genomes.genes import Boolean, Categorical, Gene, IntChoice, PowerOfTwo


def test_power_of_two_builds_its_domain_and_rejects_bad_bounds():
    assert PowerOfTwo("b", 16, 256).values == (16, 32, 64, 128, 256)
    assert PowerOfTwo("b", 4, 4).values == (4,)
    for low, high in ((12, 64), (16, 48), (64, 16), (0, 16)):
        with pytest.raises(ValueError, match="powers of two"):
            PowerOfTwo("b", low, high)


def test_constructors_order_and_kind():
    assert IntChoice("s", (4, 2, 3)).values == (2, 3, 4) and IntChoice("s", (4, 2, 3)).ordered
    cat = Categorical("m", ("pointer", "descriptor"), group="structure", doc="memory path")
    assert cat.values == ("pointer", "descriptor") and not cat.ordered and cat.group == "structure"
    assert Boolean("p").values == (False, True) and not Boolean("p").ordered


def test_empty_or_repeated_domains_are_rejected():
    with pytest.raises(ValueError, match="empty"):
        Gene("x", ())
    with pytest.raises(ValueError, match="repeated"):
        Gene("x", (1, 2, 1))


def test_check_names_the_gene_and_its_domain():
    gene = IntChoice("num_warps", (2, 4, 8))
    gene.check(4)
    with pytest.raises(ValueError, match=r"num_warps.*3.*\[2, 4, 8\]"):
        gene.check(3)


def test_random_is_seeded_and_covers_the_domain():
    gene = PowerOfTwo("b", 16, 256)
    draws = [gene.random(np.random.default_rng(5)) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same value
    rng = np.random.default_rng(0)
    many = [gene.random(rng) for _ in range(500)]
    assert set(many) == set(gene.values)
    counts = np.array([many.count(v) for v in gene.values])
    assert counts.min() > 60  # uniform: ~100 each


def test_ordered_neighbours_are_the_adjacent_values():
    gene = PowerOfTwo("b", 16, 256)
    assert gene.neighbours(64) == (32, 128)
    assert gene.neighbours(16) == (32,) and gene.neighbours(256) == (128,)
    with pytest.raises(ValueError):
        gene.neighbours(48)


def test_categorical_neighbours_are_all_other_values():
    gene = Categorical("raster", ("row", "col", "diag"))
    assert gene.neighbours("col") == ("row", "diag")
    assert Boolean("p").neighbours(True) == (False,)
    assert all(v not in gene.neighbours(v) for v in gene.values)


def test_nearest():
    gene = IntChoice("stages", (2, 3, 4, 5))
    assert gene.nearest(4) == 4 and gene.nearest(9) == 5 and gene.nearest(0) == 2
    assert PowerOfTwo("b", 16, 64).nearest(24) == 16  # a tie goes to the smaller value
    assert Categorical("m", ("pointer", "descriptor")).nearest("tma") == "pointer"


def test_restrict_returns_a_narrower_copy_in_domain_order():
    gene = PowerOfTwo("b", 16, 256, group="tile")
    narrow = gene.restrict([256, 64])
    assert narrow.values == (64, 256) and narrow.group == "tile" and narrow.name == "b"
    assert gene.values == (16, 32, 64, 128, 256)
    assert narrow.neighbours(64) == (256,)
    with pytest.raises(ValueError, match="not in its domain"):
        gene.restrict([48])
    with pytest.raises(dataclasses.FrozenInstanceError):
        gene.values = (1,)  # type: ignore[misc]


def test_a_restriction_may_leave_out_the_implied_value_and_keeps_it():
    """`genome: {backend: [gluon]}` restricts a gene whose implied value (what genomes stored before it held) is
    triton: the restriction holds, and the implied value stays, so stored genomes keep their identity."""
    gene = Categorical("backend", ("triton", "gluon"), implied=("triton",))
    narrow = gene.restrict(["gluon"])
    assert narrow.values == ("gluon",) and narrow.implied == ("triton",)
    with pytest.raises(ValueError, match="not one value of its domain"):
        Categorical("backend", ("triton", "gluon"), implied=("cuda",))  # a family's own definition is checked


def test_a_gluon_only_family_reads_genomes_stored_before_the_gene_as_they_were():
    import json

    import operators
    from evo.problem import HOPPER

    everything, gluon = operators.get("gemm"), operators.get("gemm", {"backend": ["gluon"]})
    problem = everything.problem((4096, 4096, 4096), "fp16")
    assert all(g["backend"] == "gluon" for g in gluon.family.seeds(problem, HOPPER))
    old = everything.family.seeds(problem, HOPPER)[0]  # a Triton genome, stored before `backend` existed
    stored = json.loads(old.canonical())["genes"]
    assert "backend" not in stored  # left out at its implied value
    assert gluon.family.unchecked(stored).hash == old.hash and gluon.family.unchecked(stored)["backend"] == "triton"
