"""The Ray a run uses: one this process already started (used as it is, left running), a cluster joined at an
address, or an embedded instance of the run's own, bound to 127.0.0.1 with the dashboard off and Ray's logging
quiet, whose processes a guard ends however the run ends (evo.evaluate.ray_guard).

Before joining, `check_reachable` asks the address over TCP and HTTP/2 (`resolve_address` first finds it as Ray
would, "auto" included): `ray.init(address=...)` retries an address that does not answer for minutes, out of
Ctrl-C's reach, which looks like a hang; these answer in seconds. The embedded instance keeps its files in a folder
only this user may enter (`private_temp_dir`); what Ray prints goes to the run's log (evo.evaluate.ray_output);
SIGTERM keeps the caller's handler while Ray starts; and `alive()` says when the instance died under the run,
before any call into it ends the process.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from evo.evaluate.ray_guard import RayGuard, all_alive, children_named
from evo.evaluate.ray_output import RayOutput

__all__ = ["RaySession", "check_reachable", "resolve_address", "private_temp_dir", "check_dashboard_extras"]

log = logging.getLogger(__name__)

# Ray's switch for "this machine only": with it off, Ray advertises and binds 127.0.0.1 rather than the machine's
# network address (ray._private.services.get_node_ip_address). The driver reads it from ray_constants (set when Ray
# was imported), the raylet and GCS it starts read it from their environment.
_LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_DAEMONS = ("raylet", "gcs_server")  # the embedded instance's processes whose end is the instance's end
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # RFC 9113, 3.4: what a gRPC client sends first
_SETTINGS = 4  # HTTP/2's SETTINGS frame type: a server's first frame


class RaySession:
    """`start()` returns the `ray` module, initialised; `close()` stops only a Ray that `start()` started, then
    lets the guard end what it left behind. `num_cpus` sizes an embedded instance (None: every CPU here);
    `log_path`: where what Ray prints goes while the session is open (evo.evaluate.ray_output; None: where it
    always goes)."""

    def __init__(self, address: str | None = None, dashboard: bool = False, num_cpus: int | None = None,
                 log_path: str | Path | None = None) -> None:
        self.address, self.dashboard, self.num_cpus = address, dashboard, num_cpus
        self.log_path = Path(log_path) if log_path is not None else None
        self._started = False
        self._guard: RayGuard | None = None
        self._output: RayOutput | None = None
        self._daemons: dict[int, int] = {}  # the embedded instance's raylet and GCS server: {pid: start time}

    def start(self) -> Any:
        import ray

        if ray.is_initialized():
            return ray
        if self.dashboard:
            check_dashboard_extras()
        quiet: dict[str, Any] = dict(logging_level=logging.ERROR, log_to_driver=False, namespace="evo")
        if self.address is not None:
            check_reachable(resolve_address(self.address), given=self.address)
            self._quiet()
            try:
                with _callers_sigterm(), self._all_output():
                    ray.init(address=self.address, **quiet)
            except BaseException:
                self._loud()
                raise
            self._started = True
            return ray
        # both switches are set for this start only: a later ray.init(address=...) still finds the machine's address
        from ray._private import ray_constants

        saved_env, saved_flag = os.environ.get(_LOCAL_ONLY_ENV), ray_constants.ENABLE_RAY_CLUSTER
        if saved_env is None:
            os.environ[_LOCAL_ONLY_ENV] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = os.environ[_LOCAL_ONLY_ENV].lower() not in ("0", "false")
        temp_dir = private_temp_dir()
        self._guard = RayGuard.start()
        self._quiet()
        try:
            # address "local": a new instance of this run's own, never a cluster that `ray start` left recorded
            with _callers_sigterm(), self._all_output():
                ray.init(address="local", include_dashboard=bool(self.dashboard), dashboard_host="127.0.0.1",
                         _node_ip_address="127.0.0.1", num_cpus=self.num_cpus, _temp_dir=temp_dir, **quiet)
        except BaseException:
            if ray.is_initialized():  # interrupted after Ray connected: its own shutdown, then the guard's
                with self._all_output():
                    ray.shutdown()
            self._guard.close()
            self._guard = None
            self._loud()
            raise
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = saved_flag
            if saved_env is None:
                os.environ.pop(_LOCAL_ONLY_ENV, None)
        self._started = True
        self._daemons = children_named(os.getpid(), _DAEMONS)
        _private_token()
        ip = ray.util.get_node_ip_address()
        if ip not in ("127.0.0.1", "::1", "localhost"):
            log.warning("the embedded Ray instance uses address %s, not 127.0.0.1 only", ip)
        return ray

    def alive(self) -> bool:
        """False once a daemon of the embedded instance (its raylet or GCS server) has ended: Ray's core then ends
        this process within seconds, and no call into Ray may be made. A joined cluster: always True (a node it
        loses costs its workers, which the executor handles)."""
        return all_alive(self._daemons)

    def close(self) -> None:
        try:
            if self._started:
                import ray

                with self._all_output():
                    ray.shutdown()
                self._started = False
            if self._guard is not None:
                self._guard.close()
                self._guard = None
        finally:
            self._loud()

    def _quiet(self) -> None:
        if self.log_path is not None and self._output is None:
            self._output = RayOutput(self.log_path).open()

    def _all_output(self) -> Any:
        return self._output.all_of_it() if self._output is not None else nullcontext()

    def _loud(self) -> None:
        if self._output is not None:
            self._output.close()
            self._output = None


def check_reachable(address: str, timeout_s: float = 5.0, given: str | None = None) -> None:
    """Raise ConnectionError (one line) unless a gRPC server (a Ray GCS, or a Ray Client server) answers at `address`
    ("host:port" or "ray://host:port") within `timeout_s`: something must accept a TCP connection there and answer
    HTTP/2's opening with its own (a port that accepts and stays silent would hold ray.init for minutes, out of
    Ctrl-C's reach). `given`: what the experiment wrote, when Ray resolved it to `address`. Addresses Ray resolves
    itself ("auto", "local") pass: resolve_address resolves them first."""
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if not sep or not port.isdigit():
        return
    target = f"{given} (as {address})" if given is not None and given != address else address
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as conn:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("0", "false", ""):  # TLS: the handshake comes first
                _answers_http2(conn, timeout_s)
    except OSError as e:
        reason = e.strerror or str(e) or type(e).__name__
        if given == "auto":
            raise ConnectionError(f"executor.address auto: the Ray instance found on this machine does not answer at "
                                  f"{address} ({reason}); it may be another session's or user's, or one that ended: "
                                  "give its address, or leave address out for a run of its own") from None
        raise ConnectionError(f"no Ray cluster answers at {target} ({reason}); is `ray start --head` running there, "
                              "and is the address right?") from None


def _answers_http2(conn: socket.socket, timeout_s: float) -> None:
    """Send HTTP/2's client preface and an empty SETTINGS frame; a gRPC server answers with a SETTINGS frame (a Ray
    GCS within milliseconds). OSError when nothing, or something else, comes back within `timeout_s`."""
    conn.settimeout(timeout_s)
    conn.sendall(_HTTP2_PREFACE + bytes([0, 0, 0, _SETTINGS, 0, 0, 0, 0, 0]))
    head = b""
    try:
        while len(head) < 9:
            chunk = conn.recv(9 - len(head))
            if not chunk:
                raise OSError("it closed the connection without a gRPC reply")
            head += chunk
    except TimeoutError:
        raise OSError(f"it accepts connections but sent no gRPC reply within {timeout_s:g} s") from None
    if head[3] != _SETTINGS:
        raise OSError("what answers there does not speak gRPC")


def resolve_address(address: str) -> str:
    """The host:port `ray.init(address=...)` connects to for `address`, by Ray's own rules: "auto" is what Ray finds
    on this machine (RAY_ADDRESS, the cluster `ray start` recorded, else a raylet's command line through `ps`:
    none is one line at once), and 127.0.0.1 or localhost become the machine's address unless Ray is kept local.
    check_reachable asks it next: a GCS found through `ps` may be another session's or user's and not answer, and
    Ray would retry it for minutes. "local" and "ray://" addresses are returned as given."""
    if address == "local" or "://" in address:
        return address
    from ray._private import services

    try:
        found = services.canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError) as e:
        if address == "auto":
            raise ConnectionError(f"executor.address auto: no Ray instance found on this machine "
                                  f"({_first_line(e)}); start one with `ray start --head`, or leave address out for "
                                  "a run of its own") from None
        raise ConnectionError(f"executor.address {address}: {_first_line(e)}") from None
    return found or address


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0].rstrip(".")


def private_temp_dir() -> str:
    """Ray's temp directory for an embedded instance: `ray` in a folder only this user may enter
    ($RAY_TMPDIR or the system's temp folder, then evo-ray-UID, mode 0700). Ray makes its temp and session
    directories mode 0777 without the sticky bit, where any local user could read its logs and replace its
    sockets; the folder above keeps them out. A folder of that name that is not this user's own is refused."""
    base = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir())
    folder = base / f"evo-ray-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as e:
        raise RuntimeError(f"cannot create Ray's private temp folder {folder}: {e.strerror or e}") from None
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise RuntimeError(f"{folder} is not a folder of this user's own (a link, a file or another user's): "
                           f"Ray's temp files will not go there; remove it, or set RAY_TMPDIR to another folder")
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)
    return str(folder / "ray")


def check_dashboard_extras() -> None:
    """Raise RuntimeError (one line) unless Ray's dashboard can start: it needs Ray's default extras, and
    without them ray.init logs five lines of errors before it fails."""
    try:
        import ray.dashboard.optional_deps  # noqa: F401  (Ray's own test of the same)
    except ImportError as e:
        raise RuntimeError(f"executor.dashboard: Ray's dashboard needs Ray's default extras, which are not installed "
                           f"here ({e}); pip install 'evo-kernels[dashboard]' (or 'ray[default]'), or set "
                           f"dashboard: false") from None


@contextmanager
def _callers_sigterm() -> Iterator[None]:
    """While Ray starts or joins, and after, SIGTERM keeps the handler the caller gave it. Ray's init installs its
    own in Python (one that exits at once, then one that drains the node and exits 1), and its C++ core one below
    Python's (it prints a stack dump, then hands over; at the process's exit it sometimes aborts it). evo's
    (evo.surface.stop_signals) stops the run as Ctrl-C does, and the guard ends Ray's processes."""
    from ray._private import utils as ray_utils

    install = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda handler: None
    main_thread = threading.current_thread() is threading.main_thread()
    callers = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = install
        if callers is not None:  # installed again, over the handler Ray's core put beneath Python's
            signal.signal(signal.SIGTERM, callers)


def _private_token() -> None:
    """Ray's token for clusters it starts (~/.ray/auth_token, written readable by everyone who can reach the home
    folder) made readable by this user only: with it, any local user could use the instance's GCS port."""
    token = Path.home() / ".ray" / "auth_token"
    try:
        st = os.lstat(token)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
            os.chmod(token, 0o600)
    except OSError:
        pass
