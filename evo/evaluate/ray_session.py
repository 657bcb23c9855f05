"""The Ray a run uses: one this process already started (used as it is, left running), a cluster joined at an
address, or an embedded instance of the run's own, bound to 127.0.0.1 with the dashboard off and Ray's logging
quiet, whose processes a guard ends however the run ends (evo.evaluate.ray_guard).

Before joining, `check_reachable` asks the address over plain TCP: `ray.init(address=...)` retries an
unreachable address for minutes, which looks like a hang; a TCP connection answers in seconds.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from evo.evaluate.ray_guard import RayGuard

__all__ = ["RaySession", "check_reachable"]

log = logging.getLogger(__name__)

# Ray's switch for "this machine only": with it off, Ray advertises and binds 127.0.0.1 rather than the machine's
# network address (ray._private.services.get_node_ip_address). The driver reads it from ray_constants (set when Ray
# was imported), the raylet and GCS it starts read it from their environment.
_LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


class RaySession:
    """`start()` returns the `ray` module, initialised; `close()` stops only a Ray that `start()` started, then
    lets the guard end what it left behind. `num_cpus` sizes an embedded instance (None: every CPU here)."""

    def __init__(self, address: str | None = None, dashboard: bool = False, num_cpus: int | None = None) -> None:
        self.address, self.dashboard, self.num_cpus = address, dashboard, num_cpus
        self._started = False
        self._guard: RayGuard | None = None

    def start(self) -> Any:
        import ray

        if ray.is_initialized():
            return ray
        quiet: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=False, namespace="evo")
        if self.address is not None:
            check_reachable(self.address)
            ray.init(address=self.address, **quiet)
            self._started = True
            return ray
        # both switches are set for this start only: a later ray.init(address=...) still finds the machine's address
        from ray._private import ray_constants

        saved_env, saved_flag = os.environ.get(_LOCAL_ONLY_ENV), ray_constants.ENABLE_RAY_CLUSTER
        if saved_env is None:
            os.environ[_LOCAL_ONLY_ENV] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = os.environ[_LOCAL_ONLY_ENV].lower() not in ("0", "false")
        self._guard = RayGuard.start()
        try:
            # address "local": a new instance of this run's own, never a cluster that `ray start` left recorded
            ray.init(address="local", include_dashboard=bool(self.dashboard), dashboard_host="127.0.0.1",
                     _node_ip_address="127.0.0.1", num_cpus=self.num_cpus, **quiet)
        except BaseException:
            self._guard.close()
            self._guard = None
            raise
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = saved_flag
            if saved_env is None:
                os.environ.pop(_LOCAL_ONLY_ENV, None)
        self._started = True
        ip = ray.util.get_node_ip_address()
        if ip not in ("127.0.0.1", "::1", "localhost"):
            log.warning("the embedded Ray instance uses address %s, not 127.0.0.1 only", ip)
        return ray

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
        if self._guard is not None:
            self._guard.close()
            self._guard = None


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Raise ConnectionError (one line) unless something accepts TCP connections at `address` ("host:port" or
    "ray://host:port"). Addresses Ray resolves itself ("auto", "local") are left to Ray."""
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise ConnectionError(f"no Ray cluster answers at {address} ({reason}); is `ray start --head` running "
                              f"there, and is the address right?") from None
