"""A real Ray cluster on this machine: a head started with `ray start --head` on 127.0.0.1 and a second node
joined with `ray start --address`, both with a token of this test's own. The smoke experiment runs through
`executor.address`; compile tasks must run on both nodes; the second node is killed mid-run, and the run still
ends with its whole budget stored, nothing lost or evaluated twice. Every process the test started is killed at
the end, found by the cluster's private temp directory, even when the test fails.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from evo.evaluate.ray_guard import descendants

RAY = shutil.which("ray")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(RAY is None, reason="the ray command is not installed")]

BUDGET = 24
EXPERIMENT = """name: cluster
operator: gemm
problems: {{shapes: [64x64x64], dtypes: [fp16]}}
genome: {{BLOCK_M: [32, 64], BLOCK_N: [32, 64], BLOCK_K: [32, 64]}}
initial_random: 6
budget: {{evaluations: {budget}, wall_s: 600}}
executor: {{kind: smoke, address: "127.0.0.1:{port}", gpus: 2, compile_workers: 2}}
evaluation: {{reps: 1, warmup: 0}}
"""
# Ray takes 127.0.0.1 to mean "this machine's network address" unless told that the cluster is this machine
# only; a joining node then refuses to start, so it is started with the check lifted and the address kept.
JOIN = ("import sys; from ray._private import ray_constants, services; ray_constants.ENABLE_RAY_CLUSTER = True; "
        "services.resolve_ip_for_localhost = lambda host: host; from ray.scripts.scripts import main; "
        "sys.argv[0] = 'ray'; sys.exit(main())")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class _Node:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def tree(self) -> dict[int, int]:
        return {self.proc.pid: 0, **descendants({self.proc.pid})}

    def kill(self) -> None:
        for pid in [*descendants({self.proc.pid}), self.proc.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait(timeout=30)


def _wait_for_nodes(env: dict[str, str], address: str, n: int, timeout_s: float = 120) -> None:
    probe = ("import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
             "print(sum(1 for x in ray.nodes() if x['Alive']))")
    deadline = time.monotonic() + timeout_s
    while True:
        r = subprocess.run([sys.executable, "-c", probe, address], env=env, capture_output=True, text=True,
                           timeout=120)
        if r.returncode == 0 and r.stdout.strip().splitlines()[-1:] == [str(n)]:
            return
        assert time.monotonic() < deadline, f"the cluster did not reach {n} nodes: {r.stdout} {r.stderr[-2000:]}"
        time.sleep(2)


def _rows(store: Path) -> list[tuple]:
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
            return db.execute("SELECT id, genome_hash, status, reason FROM evaluations ORDER BY id").fetchall()
    except sqlite3.Error:
        return []


def _cleanup(temp: str, nodes: list[_Node], driver: subprocess.Popen | None) -> list[str]:
    """Kill everything this test started (by tree, then by the cluster's temp directory); what was left."""
    if driver is not None and driver.poll() is None:
        driver.kill()
        driver.wait()
    for node in nodes:
        node.kill()
    left = []
    for _ in range(3):
        left = [pid for pid in descendants({1}) if temp in _cmdline(pid)]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if not left:
            break
        time.sleep(0.5)
    return [_cmdline(pid)[:120] for pid in left]


def test_a_two_node_cluster_runs_the_smoke_experiment_and_survives_losing_a_node(tmp_path):
    temp = tempfile.mkdtemp(prefix="evo-ray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # RAY_TMPDIR: Ray records "the current cluster" in its temp directory; this one must not be found by others
    # RAY_memory_monitor_refresh_ms=0: Ray's out-of-memory killer watches the whole machine, and on a 2-core CI box
    # whose test process has grown it may kill this cluster's workers; losing a node is what is tested here
    env = dict(os.environ, RAY_TMPDIR=temp, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16),
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0", RAY_memory_monitor_refresh_ms="0")
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=0", "--block", "--disable-usage-stats"]
    nodes: list[_Node] = []
    driver = None
    try:
        nodes.append(_Node([RAY, "start", "--head", f"--port={port}", f"--temp-dir={temp}",
                            "--include-dashboard=false", *common], env, tmp_path / "head.log"))
        _wait_for_nodes(env, address, 1)
        nodes.append(_Node([sys.executable, "-c", JOIN, "start", f"--address={address}", *common], env,
                           tmp_path / "second.log"))
        _wait_for_nodes(env, address, 2)
        head, second = nodes

        exp = tmp_path / "cluster.yaml"
        exp.write_text(EXPERIMENT.format(budget=BUDGET, port=port))
        run = tmp_path / "run"
        driver = subprocess.Popen([sys.executable, "-m", "evo", "run", str(exp), "--out", str(run)], env=env,
                                  stdout=(tmp_path / "driver.log").open("w"), stderr=subprocess.STDOUT)
        # which node ran what: compile tasks and worker actors show in their processes' titles
        ran: dict[str, set[str]] = {"head": set(), "second": set()}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                for name, node in (("head", head), ("second", second)):
                    for pid in node.tree():
                        title = _cmdline(pid)
                        if title.startswith(("ray::_compile_task", "ray::_WorkerActor")):
                            ran[name].add(title.split()[0])
                stop.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        deadline = time.monotonic() + 300
        while len(_rows(run / "store.sqlite")) < BUDGET // 3 or not ran["second"]:
            assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"no progress on both nodes: {ran}"
            time.sleep(0.2)
        assert "ray::_compile_task" in ran["head"] | ran["second"]
        assert ran["head"] and ran["second"], f"work ran on one node only: {ran}"

        before = _rows(run / "store.sqlite")
        assert driver.poll() is None and len(before) < BUDGET, "the run ended before the node could be killed"
        second.kill()  # the second node dies mid-run
        stop.set()
        assert driver.wait(timeout=300) == 0, ((tmp_path / "driver.log").read_text()[-3000:],
                                               [r[3] for r in _rows(run / "store.sqlite") if r[2] != "ok"][:6])
        rows = _rows(run / "store.sqlite")
        assert rows[:len(before)] == before  # nothing completed was lost
        assert len(rows) == BUDGET and len({r[0] for r in rows}) == BUDGET  # the whole budget, each once
        assert sum(r[2] == "ok" for r in rows) >= BUDGET // 2, rows
    finally:
        left = _cleanup(temp, nodes, driver)
        shutil.rmtree(temp, ignore_errors=True)
    assert left == [], f"processes of the test cluster were still running: {left}"
