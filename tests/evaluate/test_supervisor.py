"""A supervised child process: replies come back in order, a handler's exception is raised in the parent and the
child lives on, a hang is killed at its limit, a death and a reply-then-exit each bring a fresh child, and a child
that cannot start says why. (ChildWorker's rows over the same supervision: tests/evaluate/test_worker.py.)"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from evo.evaluate.supervisor import ChildDied, ChildRaised, ChildTimeout, ExitAfter, Supervised


def setup(tag: str) -> tuple[dict[str, int], str]:
    """Top-level, so that a spawned child can import it: the state counts requests; the info says who it is."""
    return {"served": 0}, f"{tag}:{os.environ.get('EVO_TEST_TAG')}"


def handle(state: dict[str, int], request: Any) -> Any:
    state["served"] += 1
    if request == "hang":
        time.sleep(3600)
    if request == "die":
        os._exit(7)
    if request == "raise":
        raise ValueError("deliberate handler error")
    if request == "last":
        return ExitAfter(("last", os.getpid()))
    return request, os.getpid(), state["served"]


def failing_setup() -> None:
    raise RuntimeError("cannot set up (deliberate)")


@pytest.fixture(scope="module")
def child():
    with Supervised(setup, handle, setup_args=("t",), env={"EVO_TEST_TAG": "env-seen"}, name="t-child") as c:
        yield c


@pytest.mark.slow
def test_replies_keep_the_state_and_the_environment(child):
    assert child.wait_ready() == "t:env-seen"
    (_, pid, n), (reply, same, m) = child.call("a", 30), child.call("b", 30)
    assert reply == "b" and same == pid and m == n + 1


@pytest.mark.slow
def test_a_raising_handler_leaves_the_child_serving(child):
    _, pid, _ = child.call("a", 30)
    with pytest.raises(ChildRaised, match="deliberate handler error") as raised:
        child.call("raise", 30)
    assert not raised.value.fatal
    assert child.call("a", 30)[1] == pid


@pytest.mark.slow
def test_hang_death_and_exit_after_each_bring_a_fresh_child(child):
    starts = child.starts
    _, pid, _ = child.call("a", 30)
    with pytest.raises(ChildTimeout, match="within 1 s"):
        child.call("hang", 1.0)
    _, after_hang, served = child.call("a", 30)
    assert after_hang != pid and served == 1  # a new process, with its own state
    with pytest.raises(ChildDied, match="exit code 7"):
        child.call("die", 30)
    reply, last_pid = child.call("last", 30)
    assert reply == "last" and child.call("a", 30)[1] != last_pid
    assert child.starts == starts + 3 and child.restarts == child.starts - 1


@pytest.mark.slow
def test_a_child_that_cannot_start_says_why():
    with Supervised(failing_setup, handle, name="broken") as c, pytest.raises(ChildDied, match="cannot set up"):
        c.call("a", 30)


def test_limits_must_be_positive():
    with pytest.raises(ValueError):
        Supervised(setup, handle, start_timeout_s=0)
    with Supervised(setup, handle, setup_args=("t",)) as c, pytest.raises(ValueError):
        c.call("a", 0)
