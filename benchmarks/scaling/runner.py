"""One run of a workload on a number of GPUs: `evo` in a child process, its stores sampled while it runs, and the
CPU it took. What the run measured is written beside its stores as `measure.json`, so the figures can be computed
again from the folder alone (`python -m benchmarks.scaling --analyse DIR`).

A run that outlasts its time limit is stopped as a user stops one (SIGINT: every completed evaluation is stored)
and marked `interrupted`; its rows still count, on the clock its problems saved.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.scaling.queue import QueueSampler
from benchmarks.scaling.stores import MEASURE, STORE_NAME, slim_copy
from benchmarks.scaling.workloads import Workload, run_env

__all__ = ["run_once", "keep_run", "cpu_ticks", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]  # the checkout: `python -m evo` runs from here
_STOP_GRACE_S = 30.0  # after SIGINT, before the run is killed


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of this machine since boot (Linux /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def run_once(workload: Workload, gpus: int, folder: Path, cache_root: Path, limit_s: float | None = None,
             sample_s: float = 2.0) -> dict[str, Any]:
    """Run `workload` on `gpus` GPUs in `folder` (stopped after `limit_s`); what it measured (also written to
    folder/measure.json). The Triton cache goes under `cache_root`, apart from the folder."""
    command = workload.command(gpus, folder)
    env = run_env(gpus, folder, cache_root)
    log = folder / "evo.log"
    sampler = QueueSampler(folder, sample_s).start()
    t0, ticks0 = time.monotonic(), cpu_ticks()
    tree0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    interrupted = False
    with log.open("w") as out:
        proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            status = proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            interrupted = True
            proc.send_signal(signal.SIGINT)
            try:
                status = proc.wait(timeout=_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                status = proc.wait()
        except BaseException:
            proc.send_signal(signal.SIGINT)
            proc.wait()
            raise
        finally:
            sampler.stop()
    took = time.monotonic() - t0
    tree1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy, total = (b - a for a, b in zip(ticks0, cpu_ticks(), strict=True))
    tail = log.read_text(errors="replace").splitlines()[-40:]
    measure = {
        "gpus": gpus, "workload": workload.name, "command": shlex.join(command),
        "cuda_visible_devices": env["CUDA_VISIBLE_DEVICES"], "exit_status": status, "interrupted": interrupted,
        "limit_s": limit_s, "evo_s": round(took, 1), "cpus": os.cpu_count(),
        "machine_cpu_busy": round(busy / total, 3) if total else None,
        # cores the `evo` process tree used (itself and the processes it reaped, Ray's among them)
        "evo_tree_cores": round((tree1.ru_utime + tree1.ru_stime - tree0.ru_utime - tree0.ru_stime) / took, 3),
        "queue_snapshots": [list(s) for s in sampler.snapshots], "rows_over_time": sampler.rows,
        "log_tail": tail,
    }
    (folder / MEASURE).write_text(json.dumps(measure, indent=1) + "\n")
    return measure


def keep_run(folder: Path, target: Path) -> None:
    """Keep what the figures need of the run in `folder` under `target`: its stores without kernel texts, its
    measure.json, its log and its experiment files (not the zoo's exported modules, caches or databases)."""
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file():
            continue
        if path.name == STORE_NAME:
            slim_copy(path, target / rel)
        elif path.name in (MEASURE, "evo.log") or path.suffix in (".yaml", ".yml"):
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / rel)
