"""Time to quality on synthetic rows: the clock starts at a problem's first measured row, rows count in the order
they finished, the target is 99% of the reference run's final elite's speed, and the edge cases (never reached, no
correct evaluation, a problem one run did not search, a reference that got there at once) say so."""

from __future__ import annotations

import pytest

from benchmarks.scaling.quality import best_ms, clock_origin, quality_goal, quality_table, reach
from tests.benchmarks.scaling.synthetic import gemm, row

A, B = gemm("64x64x64"), gemm("128x128x128")


def test_reach_counts_from_the_first_measured_row_in_the_order_rows_finished():
    rows = [row(A, 100.0, None, "compile_error", gpu="", worker=""),  # no GPU: the clock has not started
            row(A, 102.0, 2.0), row(A, 110.0, 1.0, row_id=2), row(A, 105.0, 1.5, row_id=3)]
    assert clock_origin(rows) == 102.0 and best_ms(rows) == 1.0
    got = reach(rows, 1.5)  # 105 finished before 110, though stored after it
    assert (got.seconds, got.evaluations, got.best_ms, got.reached) == (3.0, 3, 1.0, True)
    assert reach(rows, 1.0).seconds == 8.0
    assert reach(rows, 0.5) == type(got)(None, None, 1.0)  # never as fast: not reached


def test_a_problem_without_a_correct_row_reaches_nothing_and_has_no_best():
    rows = [row(A, 1.0, None, "wrong"), row(A, 2.0, None, "timeout")]
    assert best_ms(rows) is None and not reach(rows, 1.0).reached
    assert clock_origin([]) is None and best_ms([]) is None and not reach([], 1.0).reached
    only_failures = [row(A, 5.0, None, "compile_error", gpu="", worker="")]
    assert clock_origin(only_failures) == 5.0  # no row reached a GPU: its first row


def test_the_fitness_is_the_rows_own_objective_clock():
    rows = [row(A, 10.0, 2.0, objective="call"), row(A, 12.0, 1.0, objective="call")]
    assert best_ms(rows) == 1.0  # call_ms, not the GPU time stored beside it (10x)
    assert reach(rows, 1.0 / 0.99).seconds == 2.0


def _runs():
    one = {A.key: [row(A, 0.0, 4.0), row(A, 10.0, 2.0), row(A, 40.0, 1.0)],
           B.key: [row(B, 0.0, None, "wrong"), row(B, 5.0, None, "crashed")]}
    four = {A.key: [row(A, 100.0, 3.0), row(A, 103.0, 1.005), row(A, 104.0, 0.9)],
            B.key: [row(B, 100.0, 1.0)]}
    two = {B.key: [row(B, 7.0, 1.0)]}
    return {1: one, 2: two, 4: four}


def test_the_table_names_the_target_each_runs_time_and_its_share_of_the_references():
    table = quality_table(_runs(), reference=1)
    a = table[A.key]
    assert a["reference_best_ms"] == 1.0 and a["target_ms"] == pytest.approx(1 / 0.99)
    assert a["runs"]["1"]["seconds"] == 40.0 and a["runs"]["1"]["evaluations"] == 3
    assert a["runs"]["4"]["seconds"] == 3.0 and a["runs"]["4"]["of_reference_time"] == 0.075  # 1.005 <= 1.0101
    assert a["runs"]["2"] == {"searched": False}
    b = table[B.key]  # the reference found no correct kernel: no target, nothing to reach
    assert b["target_ms"] is None and "no correct evaluation in the 1-GPU run" in b["note"]
    assert b["runs"]["4"]["reached"] is False and b["runs"]["4"]["best_ms"] == 1.0


def test_a_problem_only_other_runs_searched_is_listed_without_a_target():
    runs = _runs()
    del runs[1][B.key]
    entry = quality_table(runs, reference=1)[B.key]
    assert entry["target_ms"] is None and "not searched by the 1-GPU run" in entry["note"]
    assert entry["runs"]["1"] == {"searched": False}


def test_a_reference_that_reached_its_elite_at_its_first_row_has_no_share():
    runs = {1: {A.key: [row(A, 0.0, 1.0), row(A, 9.0, 1.2)]}, 4: {A.key: [row(A, 50.0, 2.0), row(A, 52.0, 1.0)]}}
    a = quality_table(runs, reference=1)[A.key]
    assert a["runs"]["1"]["seconds"] == 0.0 and a["runs"]["4"]["seconds"] == 2.0
    assert a["runs"]["4"]["of_reference_time"] is None
    goal = quality_goal(quality_table(runs, 1), 4, 1, 0.3)
    assert goal["met"] is False and goal["missed"] == [A.key]  # later than an instant reference


def test_the_goal_needs_every_problem_with_a_target_within_the_share():
    table = quality_table(_runs(), reference=1)
    goal = quality_goal(table, 4, 1, 0.30)
    assert goal["met"] is True and goal["problems_met"] == 1 and goal["no_target"] == [B.key]
    assert quality_goal(table, 4, 1, 0.05)["met"] is False  # 3 s of 40 s is 7.5%
    assert quality_goal(table, 2, 1, 0.30)["met"] is False  # the 2-GPU run never got to A
    assert quality_goal(table, 8, 1, 0.30)["met"] is None  # no 8-GPU run: no verdict
    never = {1: {A.key: [row(A, 0.0, 2.0), row(A, 30.0, 1.0)]}, 4: {A.key: [row(A, 0.0, 2.0)]}}
    assert quality_goal(quality_table(never, 1), 4, 1, 0.3) == {
        "gpus": 4, "max_share_of_reference_time": 0.3, "met": False, "problems_met": 0, "problems": 1,
        "missed": [A.key], "no_target": []}
    empty = {1: {B.key: [row(B, 0.0, None, "wrong")]}, 4: {B.key: [row(B, 0.0, 1.0)]}}
    assert quality_goal(quality_table(empty, 1), 4, 1, 0.3)["met"] is None  # no problem has a target


def test_bad_shares_and_references_are_refused():
    with pytest.raises(ValueError, match="share"):
        quality_table(_runs(), 1, share=0)
    with pytest.raises(ValueError, match="reference run 8"):
        quality_table(_runs(), 8)
