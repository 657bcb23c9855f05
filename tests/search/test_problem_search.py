"""One problem's search as steps (evo.search.problem_search): fill the free slots up to the budget, take a result
into the store and archive, cancel what waits, drain; and a search started ahead that submits its first population
within its room, keeps what comes back early, and replays it when its run begins."""

from __future__ import annotations

import pytest

from evo.evaluate.executor import LocalExecutor
from evo.search import emitters as emitting
from evo.search.loop import Search
from evo.search.problem_search import ProblemSearch
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


@pytest.fixture(autouse=True)
def _operator(monkeypatch):
    fx.register(monkeypatch)


class Window(LocalExecutor):
    """Keeps 8 candidates in flight (evaluated one per poll, in submission order); logs what was submitted."""

    slots = 8

    def __init__(self, backend):
        super().__init__(backend)
        self.submitted = []

    def submit(self, cand):
        self.submitted.append(cand)
        super().submit(cand)


def _session(tmp_path, **kw):
    import operators

    exp = fx.experiment(name="p", **kw)
    store = Store(tmp_path / "s.sqlite")
    ex = Window(fx.StandInBackend())
    ex.start()
    events = []
    return exp, store, ex, Search(exp, operators.get(fx.OPERATOR), store, ex, events.append), events


def test_fill_slots_stops_at_the_budget_and_take_records_each_result(tmp_path):
    exp, store, ex, search, events = _session(tmp_path, evaluations=3, initial_random=6)
    with store, ex:
        ps = ProblemSearch(search, 0, exp.problems[0])
        assert ps.start()
        ps.fill_slots()
        assert ps.in_flight == ex.in_flight == 3  # the budget, not the 8 free slots
        assert all(c.emitter == emitting.INITIAL for c in ex.submitted)
        assert len({c.ticket for c in ex.submitted}) == 3
        ps.fill_slots()
        assert ex.in_flight == 3  # nothing more: the budget counts what is in flight
        (job, ev), = ex.poll()
        ps.take(job, ev)
        assert ps.in_flight == 2 and ps.archive.evaluations == 1 and store.count(exp.problems[0].key) == 1
        assert [e.kind for e in events].count("evaluation") == 1
        assert ev.run_id == "p#1" and ev.emitter == emitting.INITIAL  # stamped when stored


def test_steps_drain_what_is_in_flight_then_the_problem_closes(tmp_path):
    exp, store, ex, search, events = _session(tmp_path, sizes=(512,), evaluations=5, initial_random=2)
    with store, ex:
        ps = ProblemSearch(search, 0, exp.problems[0])
        assert ps.start()
        turns = 0
        while ps.step():
            turns += 1
        assert turns >= 5 and ps.stop == "evaluations" and ps.in_flight == 0 and ex.in_flight == 0
        assert ps.archive.evaluations == store.count(exp.problems[0].key) == 5
        # the emitters proposed once the first population was out (seeds and 2 random genomes)
        assert any(c.emitter != emitting.INITIAL for c in ex.submitted)
        archive, summary = ps.close()
        assert summary.evaluations == 5 and store.meta(f"summary:{exp.problems[0].key}")["evaluations"] == 5
        assert events[-1].kind == "problem_done"
        # started again (a resume), it is done already: reported, nothing submitted
        again = ProblemSearch(search, 0, exp.problems[0])
        assert not again.start() and again.stop == "evaluations" and len(ex.submitted) == 5


def test_cancel_waiting_gives_back_the_slots_and_the_emitters_proposals(tmp_path):
    exp, store, ex, search, _ = _session(tmp_path, sizes=(512,), evaluations=40, initial_random=0)
    with store, ex:
        ps = ProblemSearch(search, 0, exp.problems[0])
        assert ps.start()
        ps.queue.clear()  # the emitters fill every slot
        ps.fill_slots()
        assert ex.in_flight == 8 and len(ps.arms) == 8
        assert sum(a.pending for a in ps.scheduler.arms) == 8
        ps.cancel_waiting()
        assert ps.in_flight == ex.in_flight == 0 and ps.cancelled and not ps.arms
        assert sum(a.pending for a in ps.scheduler.arms) == 0


def test_a_search_started_ahead_keeps_its_early_results_for_its_run(tmp_path):
    exp, store, ex, search, events = _session(tmp_path, evaluations=3, initial_random=6)
    first, second = exp.problems
    with store, ex:
        ahead = ProblemSearch.ahead(search, 1, second, {})
        assert ahead.room == 3 and ahead.started_ahead and not ahead.running
        ahead.fill_slots()
        assert ahead.in_flight == 3 and all(c.problem.key == second.key for c in ex.submitted)
        assert all(c.emitter == emitting.INITIAL for c in ex.submitted)
        came = [ex.poll()[0] for _ in range(2)]
        for job, ev in came:
            ahead.take(job, ev)
        assert ahead.in_flight == 1 and [ev for _, ev in ahead.early] == [ev for _, ev in came]
        assert store.count(second.key) == 2 and ahead.archive is None  # stored, not yet in an archive
        ahead.fill_slots()
        assert ahead.in_flight == 1  # its room counts the early rows: nothing more before its run
        assert not events  # nothing told before its run begins
        search._next = ahead
        archive, summary = search.search_problem(1, second)
        assert summary.evaluations == 3 and store.count(second.key) == 3 and len(ex.submitted) == 3
        replayed = [e.evaluation.id for e in events if e.kind == "evaluation"][:2]
        assert replayed == [ev.id for _, ev in came]  # the early rows entered the archive first, as they came
        assert search._next is None
