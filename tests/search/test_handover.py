"""The next problem's first population starts while the problem before it drains (evo.search.handover): with a
window of several candidates, results that come back out of order, and every row in the right problem's archive."""

from __future__ import annotations

import pytest

from evo.archive import GridArchive
from evo.evaluate.executor import LocalExecutor
from evo.search.loop import Search
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


@pytest.fixture(autouse=True)
def _operator(monkeypatch):
    fx.register(monkeypatch)


class Windowed(LocalExecutor):
    """Keeps 4 candidates in flight and evaluates the newest first: results in another order than submits, as
    from Ray, but deterministic. Logs ("submit"|"result", problem key)."""

    slots = 4

    def __init__(self, backend):
        super().__init__(backend)
        self.log = []

    def submit(self, cand):
        self.log.append(("submit", cand.problem.key))
        super().submit(cand)

    def poll(self, timeout_s=None):
        self._queue.reverse()  # the newest is evaluated first
        out = super().poll(timeout_s)
        self._queue.reverse()
        self.log += [("result", c.problem.key) for c, _ in out]
        return out


def test_the_next_problem_starts_while_the_last_candidates_of_the_one_before_are_in_flight(tmp_path):
    import operators

    exp = fx.experiment(name="h", evaluations=10)
    first, second = exp.problems
    op = operators.get(fx.OPERATOR)
    events, stored_at_start = [], []

    def on_event(e):
        events.append(e)
        if e.kind == "problem_start" and e.problem_index == 1:  # what came back early is stored already
            stored_at_start.append(store.count(second.key))

    with Store(tmp_path / "s.sqlite") as store, Windowed(fx.StandInBackend()) as ex:
        search = Search(exp, op, store, ex, on_event)
        summary = search.run()
        assert [s.evaluations for s in summary.problems] == [10, 10]
        for p in exp.problems:
            rows = store.evaluations(p.key)
            assert len(rows) == 10 and len({r.genome_hash for r in rows}) == 10
            rebuilt = GridArchive.from_store(store, p, op, exp.descriptors, exp.evaluation.noise_margin)
            assert rebuilt.elites() == search.archives[p.key].elites()
        assert any(r.origin == "transfer" for r in store.evaluations(second.key))
    early = ex.log.index(("submit", second.key))
    last_of_first = max(i for i, e in enumerate(ex.log) if e == ("result", first.key))
    assert early < last_of_first  # its first candidates went out before the first problem's last result came back
    assert ex.log.index(("result", second.key)) < last_of_first  # and some came back first: stored at once
    assert stored_at_start and stored_at_start[0] > 0
    kinds = [(e.kind, e.problem_index) for e in events if e.kind != "workers"]
    assert kinds.index(("problem_done", 0)) < kinds.index(("problem_start", 1)) < kinds.index(("evaluation", 1))
    assert [e.evaluations for e in events if e.kind == "evaluation" and e.problem_index == 1] == list(range(1, 11))


class Wide(Windowed):
    slots = 8


def test_a_first_population_larger_than_the_budget_does_not_overrun_it(tmp_path):
    """The window holds more than the next problem's whole budget: the hand-over submits no more than it may
    evaluate (a GPU run of 16 evaluations per problem made 18 on its second problem)."""
    import operators

    exp = fx.experiment(name="w", evaluations=3, initial_random=6)
    with Store(tmp_path / "s.sqlite") as store, Wide(fx.StandInBackend()) as ex:
        summary = Search(exp, operators.get(fx.OPERATOR), store, ex).run()
        assert [s.evaluations for s in summary.problems] == [3, 3]
        assert [store.count(p.key) for p in exp.problems] == [3, 3]
    assert ex.log.count(("submit", exp.problems[1].key)) == 3
