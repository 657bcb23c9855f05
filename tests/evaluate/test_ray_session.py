"""Before joining a cluster, its address is asked over plain TCP: nobody there is one line within seconds
(ray.init would retry for minutes); addresses Ray resolves itself are left to Ray."""

from __future__ import annotations

import socket
import time

import pytest

from evo.evaluate.ray_session import check_reachable


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


def test_a_listening_address_passes_and_ray_keywords_are_left_to_ray():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_reachable(f"127.0.0.1:{server.getsockname()[1]}")
    for address in ("auto", "local", "ray://head"):
        check_reachable(address)  # nothing to ask: Ray resolves these
