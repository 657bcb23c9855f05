"""When the run's own Ray instance dies (its raylet killed), the executor says so before any call into Ray (Ray's
core ends a driver that makes one: exit 1, no evo line): the evaluations it holds are handed over first, then
WorkersLost names the instance and its log; shutting down makes no call into the dead instance. No Ray here: the
session is a stand-in whose daemons are gone."""

from __future__ import annotations

import pytest

from evo.evaluate.executor import WorkersLost
from evo.evaluate.ray_executor import RayExecutor
from evo.experiment.spec import EvaluationSpec, ExecutorSpec
from tests.fixtures.faulty_operator import candidate
from tests.fixtures.worker_standins import QueueBackend


class _DeadSession:
    log_path = "RUN/ray.log"
    closed = False

    def alive(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


class _NoRay:
    """Any call into it fails the test: a dead instance must not be called."""

    def __getattr__(self, name):
        raise AssertionError(f"ray.{name} called on a dead instance")


def test_a_dead_instance_hands_over_what_completed_then_says_it_died(tmp_path):
    ex = RayExecutor(QueueBackend(0.0, str(tmp_path)), ExecutorSpec(kind="smoke"), EvaluationSpec())
    session = ex._session = _DeadSession()
    ex._ray = _NoRay()
    cand = candidate()
    done = (cand, cand.row("ok", "", median_ms=1.0))
    ex._done.append(done)
    ex._waiting.append(candidate())  # rendered, waiting for a compile slot: never sent to the dead instance
    assert ex.poll(timeout_s=0) == [done]
    with pytest.raises(WorkersLost) as e:
        ex.poll(timeout_s=0)
    assert str(e.value) == ("the Ray instance of this run died (its raylet or GCS server ended; Ray's messages are "
                            "in RUN/ray.log); every completed evaluation is stored")
    ex.submit(candidate())  # the search may still submit before it sees the error: queued, not sent
    ex.shutdown()
    assert session.closed
