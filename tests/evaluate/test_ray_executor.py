"""The Ray executor keeps a second call queued on each GPU worker's actor, so a GPU that finishes starts its next
candidate without waiting for the driver; when an actor dies, only the call it was evaluating is lost (a
`crashed` row), and the call queued behind it is evaluated again on the restarted actor. Candidates dropped at
a budget's end stop their compiles without killing the compile processes. One embedded Ray instance (2 CPUs)
for the file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from evo.evaluate.ray_executor import RayExecutor
from evo.experiment.spec import EvaluationSpec, ExecutorSpec
from tests.fixtures.faulty_operator import candidate
from tests.fixtures.worker_standins import QueueBackend

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_up():
    ray = pytest.importorskip("ray")
    mp = pytest.MonkeyPatch()
    mp.chdir(REPO)  # the actors import the test backend from the driver's working directory
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        mp.undo()


def _executor(tmp_path, delay_s, compile_s=0.0):
    ex = RayExecutor(QueueBackend(delay_s, str(tmp_path), compile_s),
                     ExecutorSpec(kind="smoke", gpus=1, compile_workers=2), EvaluationSpec(timeout_s=30))
    ex.start()
    return ex


def _collect(ex, n, timeout_s=60.0):
    done, deadline = [], time.monotonic() + timeout_s
    while len(done) < n and time.monotonic() < deadline:
        done += ex.poll(timeout_s=1.0)
    return done


def test_the_next_call_waits_on_the_actor_not_on_the_driver(ray_up, tmp_path):
    # each evaluation holds the worker for 1 s: long enough for the second compile to reach the actor while the
    # first call evaluates, also on a box busy with another test worker
    ex = _executor(tmp_path, delay_s=1.0)
    try:
        assert ex.slots == 5  # one worker: its two calls, one more compiled, two ahead
        cands = [candidate(n=1024 + 16 * k) for k in range(2)]
        for c in cands:
            ex.submit(c)
        deadline = time.monotonic() + 30
        while len(ex._workers[0].calls) < 2 and time.monotonic() < deadline:  # both compiled and sent to the actor
            assert ex.poll(timeout_s=0.05) == []
        time.sleep(3.0)  # the driver looks away for longer than both evaluations take
        rows = sorted((ev for _, ev in _collect(ex, 2)), key=lambda ev: ev.started_at)
    finally:
        ex.shutdown()
    assert [ev.status for ev in rows] == ["ok", "ok"]
    assert rows[1].started_at - rows[0].finished_at < 0.25  # it did not wait for the driver's next look


def test_an_actor_death_loses_only_the_call_it_was_evaluating(ray_up, tmp_path):
    ex = _executor(tmp_path, delay_s=0.2)
    try:
        dying = candidate("launcher_exit")
        queued = [candidate(n=1024 + 16 * k) for k in range(2)]
        ex.submit(dying)
        for c in queued:
            ex.submit(c)
        done = _collect(ex, 3)
    finally:
        ex.shutdown()
    assert len(done) == 3 and len({(ev.problem_key, ev.genome_hash) for _, ev in done}) == 3
    crashed = [ev for _, ev in done if ev.status == "crashed"]
    assert len(crashed) == 1 and "worker died" in crashed[0].reason
    assert crashed[0].genome_hash == dying.genome.hash  # the call it was evaluating, not one queued behind it
    assert sorted(ev.status for c, ev in done if c.genome.hash != dying.genome.hash) == ["ok", "ok"]


def test_dropping_candidates_at_a_budget_leaves_the_compiles_and_their_processes_alone(ray_up, tmp_path):
    """A compile under way when the budget ends runs to its end: interrupted (a cancel), it could leave its process
    with a half-imported torch that fails every later compile; killed (a forced cancel), the next problem would
    wait for new processes."""
    import os

    ex = _executor(tmp_path, delay_s=0.1, compile_s=3.0)
    try:
        ex.submit(candidate())
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("compile-*")) and time.monotonic() < deadline:  # the compile is running
            ex.poll(timeout_s=0.1)
        (mark,) = tmp_path.glob("compile-*")
        assert len(ex.cancel_waiting()) == 1 and ex.in_flight == 0
        assert ex.poll(timeout_s=0.1) == []  # its result is not handed out
        deadline = time.monotonic() + 30
        while not list(tmp_path.glob("compiled-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert list(tmp_path.glob("compiled-*")), "the compile under way was interrupted"
        os.kill(int(mark.name.split("-")[1]), 0)  # the process is alive: the next problem's compiles need no new one
    finally:
        ex.shutdown()
