"""Coverage over the cells a restricted genome space can reach (issue 41: smoke.yaml's 6 elites read as 13% of 45
cells where 8 can be reached at all)."""

from __future__ import annotations

import operators
from evo.archive.grid import GridArchive
from evo.archive.reachable import experiment_reachable, reachable_cells
from evo.experiment.config import load_experiment
from evo.experiment.spec import DescriptorSpec
from evo.problem import INTERPRETED_HOPPER
from tests.fixtures.run_fixture import make_run

SMOKE_GENES = {"BLOCK_M": [16, 32, 64], "BLOCK_N": [32, 64], "BLOCK_K": [32, 64]}  # experiments/smoke.yaml's


def _archive(op, problem):
    return GridArchive.for_problem(op, problem, [DescriptorSpec("tile_area"), DescriptorSpec("block_k")])


def test_the_smoke_restriction_reaches_8_of_45_cells():
    op = operators.get("gemm", SMOKE_GENES)
    problem = op.problem((64, 64, 64), "fp16")
    archive = _archive(op, problem)
    # tile_area in {16x32, 16x64 = 32x32, 32x64, 64x64}, block_k in {32, 64}: 4 x 2 cells of the 9 x 5 grid
    assert archive.cells == 45 and reachable_cells(archive, op, problem, INTERPRETED_HOPPER) == 8
    whole = operators.get("gemm")
    assert 8 < reachable_cells(_archive(whole, problem), whole, problem, INTERPRETED_HOPPER) < 45


def test_seeded_and_never_below_the_filled_cells():
    op = operators.get("gemm", SMOKE_GENES)
    problem = op.problem((64, 64, 64), "fp16")
    archive = _archive(op, problem)
    assert reachable_cells(archive, op, problem, INTERPRETED_HOPPER, samples=0) >= 1  # the seeds alone
    first = reachable_cells(archive, op, problem, INTERPRETED_HOPPER, samples=64, seed=3)
    assert reachable_cells(archive, op, problem, INTERPRETED_HOPPER, samples=64, seed=3) == first


def test_status_and_report_give_coverage_over_the_reachable_cells(tmp_path):
    from evo.store.sqlite import Store
    from evo.surface.export import run_target
    from evo.surface.report_html import _coverage
    from evo.surface.status import format_status, run_status

    run = make_run(tmp_path, smoke=True)
    text = run.joinpath("experiment.yaml").read_text()
    run.joinpath("experiment.yaml").write_text(text + "genome: {BLOCK_M: [16, 32, 64], BLOCK_N: [32, 64], "
                                                      "BLOCK_K: [32, 64]}\n")
    experiment = load_experiment(run / "experiment.yaml")
    with Store(run / "store.sqlite", readonly=True) as store:
        (row,) = run_status(store, experiment)
        problem = operators.get("gemm").problem((64, 64, 64), "fp16")
        archive = GridArchive.from_store(store, problem, operators.get("gemm"), experiment.descriptors)
        target = run_target(store.all_meta())
    # the fixture's rows were drawn from the whole space: their cells count as reached too
    assert row.reachable == experiment_reachable(archive, problem, experiment, target)
    assert row.filled <= row.reachable < row.cells == 45
    shown = f"{row.filled / row.reachable:.0%} of {row.reachable} reachable ({row.filled}/45 cells)"
    assert shown in format_status([row], smoke=True)
    summary = {"coverage": row.coverage, "filled": row.filled, "cells": 45, "reachable": row.reachable}
    assert _coverage(summary).startswith(f"{row.filled / row.reachable:.0%} of {row.reachable} reachable cells")
