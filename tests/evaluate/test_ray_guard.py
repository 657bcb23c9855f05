"""The Ray guard's process tree: every live descendant of the roots, zombies left out, never the roots."""

from __future__ import annotations

import os

from evo.evaluate.ray_guard import descendants

# pid: (ppid, start time, state)
TABLE = {1: (0, 1, "S"), 10: (1, 5, "S"), 11: (10, 6, "S"), 12: (11, 7, "R"), 13: (10, 8, "Z"), 14: (13, 9, "S"),
         20: (1, 5, "S")}


def test_descendants_follow_the_tree_and_skip_zombies():
    assert descendants({10}, TABLE) == {11: 6, 12: 7}  # 13 is a zombie: neither it nor what hangs under it
    assert descendants({12}, TABLE) == {}
    assert descendants({1}, TABLE) == {10: 5, 11: 6, 12: 7, 20: 5}


def test_descendants_of_this_process_are_read_from_proc():
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in descendants({os.getpid()})
    finally:
        child.kill()
        child.wait()


def test_the_embedded_instances_daemons_are_found_by_name_and_their_end_is_seen(tmp_path):
    """A run watches its raylet and GCS server: once one is gone, any call into Ray ends the driver (exit 1, some
    fifty lines of Ray state, no evo line), so the executor must know first."""
    import subprocess
    import sys

    from evo.evaluate.ray_guard import all_alive, children_named

    raylet = tmp_path / "raylet"  # the command name (/proc/PID/comm) comes from the file run, as Ray's daemon's does
    raylet.symlink_to(sys.executable)
    child = subprocess.Popen([str(raylet), "-c", "import time; time.sleep(30)"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        found = children_named(os.getpid(), ("raylet", "gcs_server"))
        assert list(found) == [child.pid] and all_alive(found)
        child.kill()
        child.wait()
        assert not all_alive(found)
        assert all_alive({})  # no daemons of its own (a joined cluster): alive
    finally:
        for proc in (child, other):
            proc.kill()
            proc.wait()
