"""Is a Ray cluster there at all? `ray.init(address=...)` retries an unreachable address for minutes, which looks
like a hang; a plain TCP connection answers in seconds, so an address nobody listens on is one line at once."""

from __future__ import annotations

import socket

__all__ = ["check_reachable"]


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Raise ConnectionError (one line) unless something accepts TCP connections at `address` ("host:port" or
    "ray://host:port"). Addresses Ray resolves itself ("auto", "local") are left to Ray."""
    text = address.split("://", 1)[-1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            pass
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConnectionError(f"no Ray cluster answers at {address} ({reason}); is `ray start --head` running "
                              f"there, and is the address right?") from None
