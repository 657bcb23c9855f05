"""The live progress view: redrawn in place on a terminal, plain log lines otherwise."""

from __future__ import annotations

import io

from evo.problem import Problem
from evo.search.events import SearchEvent
from evo.surface.progress import Progress

P1 = Problem("gemm", (("M", 64), ("N", 64), ("K", 64)), "fp16")
P2 = Problem("gemm", (("M", 16), ("N", 64), ("K", 64)), "fp16")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def ev(kind, problem=P1, n=0, best=None, ratio=None, failures=None, busy=1, **extra):
    return SearchEvent(kind=kind, problem_key=problem.key, problem_index=0, problems=2, evaluations=n, budget=10,
                       best=best, best_ratio=ratio, unit="TFLOP/s", failures=failures or {}, busy_workers=busy,
                       total_workers=2, coverage=0.25, qd_score=0.0, elapsed_s=0.0, **extra)


def test_plain_log_lines_when_not_a_terminal():
    out, clock = io.StringIO(), Clock()
    p = Progress([P1, P2], budget=10, stream=out, clock=clock, heartbeat_s=5)
    assert not p.tty
    p(ev("problem_start"))
    p(ev("evaluation", n=1, failures={"compile_error": 1}))
    p(ev("evaluation", n=2, best=100.0, ratio=0.9))
    p(ev("evaluation", n=3, best=100.0, ratio=0.9))  # not a new best: no line
    clock.t = 6.0
    p(ev("evaluation", n=4, best=120.0, ratio=1.08, failures={"compile_error": 1, "wrong": 2}))
    p(ev("problem_done", n=4, best=120.0, ratio=1.08, failures={"compile_error": 1, "wrong": 2},
         reason="evaluations"))
    p(ev("message", n=4, best=120.0, message="hello"))
    p.close()
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()
    assert sum("new best" in line for line in lines) == 2
    assert any("new best 100 TFLOP/s (0.90x baseline) at evaluation 2" in line for line in lines)
    assert any(line.startswith("[0:06]") and "new best 120" in line for line in lines)
    assert any("done (evaluations)" in line and "wrong 2 cmp 1" in line for line in lines)
    assert any(line.endswith("hello") for line in lines)
    assert lines[-1].endswith("4 evaluations, 1/2 problems done, GPU workers busy 1/2")


def test_terminal_view_redraws_in_place():
    out, clock = io.StringIO(), Clock()
    p = Progress([P1, P2], budget=10, stream=out, tty=True, clock=clock, min_redraw_s=0.0)
    p(ev("problem_start"))
    p(ev("evaluation", n=3, best=50.0, ratio=1.25, failures={"timeout": 1}, busy=2))
    text = out.getvalue()
    assert "\x1b[" in text and "F\x1b[J" in text  # cursor up to the block's start, clear, redraw
    view = p.lines()
    assert "GPU workers busy 2/2" in view[0]
    row = next(line for line in view if line.startswith(P1.key))
    assert "3/10" in row and "running" in row and "50 TFLOP/s (1.25x baseline)" in row and "tmo 1" in row
    assert "25%" in row
    waiting = next(line for line in view if line.startswith(P2.key))
    assert "waiting" in waiting and "0/10" in waiting


def test_terminal_redraws_are_throttled():
    out, clock = io.StringIO(), Clock()
    p = Progress([P1], stream=out, tty=True, clock=clock, min_redraw_s=1.0)
    p(ev("problem_start"))
    drawn = out.getvalue().count("problem ")
    for n in range(1, 50):
        p(ev("evaluation", n=n))
    assert out.getvalue().count("problem ") == drawn  # no time passed: no redraw
    clock.t = 2.0
    p(ev("evaluation", n=50))
    assert out.getvalue().count("problem ") == drawn + 1


def test_smoke_runs_are_labelled_not_a_timing():
    out = io.StringIO()
    p = Progress([P1], stream=out, smoke=True)
    p(ev("evaluation", n=1, best=0.004, ratio=0.01))
    p.close()
    text = out.getvalue()
    assert "0.004 (stand-in score, NOT a timing)" in text and "baseline" not in text and "/s" not in text


def test_speed_of_light_share_is_shown_when_known():
    out = io.StringIO()
    p = Progress([P1], budget=10, stream=out, clock=Clock())
    p(ev("evaluation", n=1, best=100.0, ratio=0.9, sol_share=0.734))
    p(ev("evaluation", problem=P2, n=1, best=90.0, ratio=0.9))  # no floor known: nothing invented
    text = out.getvalue()
    assert "73% of SOL" in text and text.count("of SOL") == 1


def test_status_shows_the_share_of_the_saved_floor(tmp_path):
    import operators
    from evo.evaluate.candidate import Candidate
    from evo.problem import HOPPER
    from evo.store.sqlite import Store
    from evo.surface.status import format_status, run_status

    op = operators.get("gemm")
    genome = op.family.seeds(P1, HOPPER)[0]
    with Store(tmp_path / "s.sqlite") as store:
        for problem in (P1, P2):  # TEST DATA: made-up times
            store.add(Candidate(problem, genome, op).row("ok", median_ms=0.02, baseline_ms=0.01, gpu="test"))
        store.set_meta(f"floor:{P1.key}", {"ms": 0.005})
        store.set_meta(f"floor:{P2.key}", None)  # a run without a floor
        rows = run_status(store)
    assert rows[0].sol_share == 0.25 and rows[1].sol_share is None
    table = format_status(rows)
    assert " 25% " in table and "SOL" in table.splitlines()[0]
    assert "n/a (smoke)" in format_status(rows, smoke=True)


def _timed(kind, problem, n, elapsed, budget=10):
    return SearchEvent(kind=kind, problem_key=problem.key, problem_index=0, problems=2, evaluations=n, budget=budget,
                       best=None, best_ratio=None, unit="TFLOP/s", failures={}, busy_workers=1, total_workers=2,
                       coverage=0.0, qd_score=0.0, elapsed_s=elapsed)


def test_time_left_from_the_evaluation_budget_and_the_rate_so_far():
    # issue 41: the view had no ETA
    out, clock = io.StringIO(), Clock()
    p = Progress([P1, P2], budget=10, stream=out, clock=clock, tty=True)
    p(_timed("problem_start", P1, 0, 0.0))
    assert p.eta_s() is None  # no rate yet, no wall budget: nothing honest to say
    assert "left" not in p.lines()[0]
    clock.t = 20.0
    p(_timed("evaluation", P1, 4, 20.0))  # 0.2 evaluations a second
    assert p.eta_s() == 30.0 + 50.0  # P1: 6 left at its rate; P2 waiting: 10 at the latest rate
    assert "about 1:20 left" in p.lines()[0]
    p(_timed("problem_done", P1, 10, 50.0))
    clock.t = 30.0  # time passing does not move a finished problem's share
    assert p.eta_s() == 10 / (10 / 50.0)


def test_time_left_from_the_wall_budget_and_the_earlier_limit():
    out, clock = io.StringIO(), Clock()
    p = Progress([P1], budget=None, stream=out, clock=clock, wall_s=60.0, heartbeat_s=1.0)
    p(_timed("problem_start", P1, 0, 0.0, budget=None))
    clock.t = 15.0  # a running problem's wall clock runs on between events
    assert p.eta_s() == 45.0
    p(_timed("evaluation", P1, 3, 15.0, budget=None))  # the heartbeat line carries it
    assert "about 0:45 left" in out.getvalue().splitlines()[-1]
    q = Progress([P1], budget=10, stream=io.StringIO(), clock=clock, wall_s=600.0)
    q(_timed("evaluation", P1, 5, 10.0))
    assert q.eta_s() == min(600.0 - 10.0, 5 / 0.5)  # the evaluation budget ends it first
