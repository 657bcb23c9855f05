"""Before joining a cluster, its address is resolved as Ray would and asked over TCP and HTTP/2: nobody there, or a
port that accepts and stays silent, is one line within seconds (ray.init would retry for minutes, out of Ctrl-C's
reach); `auto` that finds nothing is one line at once. The embedded instance keeps its files in a folder of this
user's only, keeps the caller's SIGTERM handler while it starts, and a missing dashboard extra is one line before
Ray starts. None of these tests starts Ray."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import threading
import time

import pytest

from evo.evaluate.ray_session import (
    _callers_sigterm,
    check_dashboard_extras,
    check_reachable,
    private_temp_dir,
    resolve_address,
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_nobody_answers_at_is_one_line_at_once():
    port = _free_port()
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match=f"no Ray cluster answers at ray://127.0.0.1:{port}") as e:
        check_reachable(f"ray://127.0.0.1:{port}", timeout_s=2.0)
    assert time.monotonic() - t0 < 5.0 and "\n" not in str(e.value)


def _server(reply: bytes | None) -> tuple[socket.socket, threading.Thread]:
    """A listening socket on 127.0.0.1 that answers each connection's first bytes with `reply` (None: silence)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        held = []
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the test is over
                return
            held.append(conn)
            if reply is not None:
                conn.recv(64)
                conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


SETTINGS_FRAME = bytes([0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100])  # what a gRPC server sends first


def test_a_port_that_answers_as_grpc_does_passes_and_ray_keywords_are_left_to_ray():
    server, _ = _server(SETTINGS_FRAME)
    with server:
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}")
        check_reachable(f"ray://127.0.0.1:{server.getsockname()[1]}")
    for address in ("auto", "local", "ray://head"):
        check_reachable(address)  # nothing to ask: resolve_address resolves these first


@pytest.mark.parametrize("reply, says", [(None, "sent no gRPC reply within 1 s"),
                                         (b"HTTP/1.1 400 Bad Request\r\n\r\n", "does not speak gRPC")])
def test_a_port_that_accepts_but_is_no_gcs_is_one_line_within_the_timeout(reply, says):
    """A listener that never answers held ray.init for 35 s, Ctrl-C included; now it is refused in a second."""
    server, _ = _server(reply)
    with server:
        port = server.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(ConnectionError) as e:
            check_reachable(f"127.0.0.1:{port}", timeout_s=1.0)
    assert time.monotonic() - t0 < 3.0
    assert f"no Ray cluster answers at 127.0.0.1:{port}" in str(e.value) and says in str(e.value)
    assert "\n" not in str(e.value)


@pytest.fixture
def no_ray_here(monkeypatch, tmp_path):
    """No Ray instance on this machine as `auto` sees it: no RAY_ADDRESS, no `ray start` record, no raylet in ps
    (other sessions' Ray on this machine must not decide the test)."""
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    found: set[str] = set()
    monkeypatch.setattr(services, "find_gcs_addresses", lambda: frozenset(found))
    return found


def test_auto_that_finds_no_ray_instance_is_one_line_at_once(no_ray_here):
    t0 = time.monotonic()
    with pytest.raises(ConnectionError, match="executor.address auto: no Ray instance found on this machine"):
        resolve_address("auto")
    assert time.monotonic() - t0 < 2.0


def test_auto_that_finds_a_gcs_that_does_not_answer_is_one_line_within_seconds(no_ray_here):
    """Another session's raylet, seen through ps, names a GCS this run cannot reach: Ray retried it for 255 s."""
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    no_ray_here.add(f"127.0.0.1:{port}")
    t0 = time.monotonic()
    with pytest.raises(ConnectionError) as e:
        check_reachable(resolve_address("auto"), timeout_s=2.0, given="auto")
    assert time.monotonic() - t0 < 5.0
    assert str(e.value).startswith("executor.address auto: the Ray instance found on this machine does not answer")
    assert f":{port}" in str(e.value) and "\n" not in str(e.value)


def test_rays_temp_files_go_to_a_folder_only_this_user_may_enter(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    temp = private_temp_dir()
    folder = tmp_path / f"evo-ray-{os.getuid()}"
    assert temp == str(folder / "ray")  # Ray makes `ray` 0777; the folder above keeps others out
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o755)  # loosened since: tightened again
    assert private_temp_dir() == temp and stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_temp_folder_that_is_a_link_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"evo-ray-{os.getuid()}").symlink_to(tmp_path / "elsewhere")  # planted by another local user
    with pytest.raises(RuntimeError, match="is not a folder of this user's own"):
        private_temp_dir()


def test_a_dashboard_without_rays_extras_is_one_line_before_ray_starts(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray.dashboard.optional_deps", None)  # import fails as without aiohttp
    with pytest.raises(RuntimeError) as e:
        check_dashboard_extras()
    assert str(e.value).startswith("executor.dashboard: Ray's dashboard needs Ray's default extras")
    assert "pip install" in str(e.value) and "\n" not in str(e.value)


def test_sigterm_keeps_the_callers_handler_while_ray_starts():
    """Ray's init replaced SIGTERM's handler with one that exits (1, or 15, with a stack dump): a SIGTERM in the
    first seconds of a run then ended it with no evo line and no exit 143."""
    from ray._private import utils as ray_utils

    def mine(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with _callers_sigterm():
            ray_utils.set_sigterm_handler(lambda signum, frame: sys.exit(signum))  # what ray.init calls
            assert signal.getsignal(signal.SIGTERM) is mine
        ray_utils.set_sigterm_handler(mine)  # Ray's own function is back
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
