"""What Ray prints goes to the run's log, evo's own lines still to the terminal: a raylet that died printed some
fifty lines of Ray state (to stdout from a Ray thread, to descriptor 2 from Ray's C++ core) around evo's one line."""

from __future__ import annotations

import logging
import os
import sys
import threading

from evo.evaluate.ray_output import RayOutput


def _in_thread(name: str, fn) -> None:
    thread = threading.Thread(target=fn, name=name)
    thread.start()
    thread.join()


def test_rays_writes_go_to_the_log_and_evos_to_the_terminal(tmp_path, capfd):
    log = tmp_path / "ray.log"
    out, err = sys.stdout, sys.stderr
    output = RayOutput(log).open()
    try:
        os.write(2, b"native core line\n")  # Ray's C++ core writes to descriptor 2
        _in_thread("ray_listen_error_messages", lambda: print("(raylet) state dump"))  # Ray's error thread
        logging.getLogger("ray").error("a ray logger line")
        with output.all_of_it():  # Ray's shutdown flushes held-back messages from the caller's thread
            print("flushed at shutdown")
        print("evo progress")
        print("evo: error: one line", file=sys.stderr)
        _in_thread("worker", lambda: print("a thread of evo's own", file=sys.stderr))
    finally:
        output.close()
    assert sys.stdout is out and sys.stderr is err  # put back
    os.write(2, b"after close\n")
    text = log.read_text()
    for line in ("native core line", "(raylet) state dump", "a ray logger line", "flushed at shutdown"):
        assert line in text
    terminal = capfd.readouterr()
    assert terminal.out == "evo progress\n"
    assert terminal.err == "evo: error: one line\na thread of evo's own\nafter close\n"
    assert "evo" not in text
    assert oct(log.stat().st_mode & 0o777) == "0o600"  # Ray's messages may name paths and sources


def test_a_resumed_run_adds_to_the_log_and_the_ray_logger_is_given_back(tmp_path):
    log = tmp_path / "ray.log"
    ray_logger = logging.getLogger("ray")
    handlers, propagate = list(ray_logger.handlers), ray_logger.propagate
    for session in ("first", "second"):
        output = RayOutput(log).open()
        ray_logger.error(session)
        output.close()
    assert log.read_text().split() == ["first", "second"]
    assert ray_logger.handlers == handlers and ray_logger.propagate == propagate
