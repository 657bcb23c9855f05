"""LOAD TEST stand-ins for the GPU side: a backend whose "GPU workers" hold each candidate for a recorded
evaluation time and whose compile stage takes a recorded compile time, so that the search's driver, the
compile pool and the store can be loaded as 1, 2, 4 or 8 GPUs would load them, on a machine without any.

Nothing here is a fitness. Every row says so: gpu "loadtest", baseline "loadtest", versions {"mode":
"loadtest"}, and reason LOADTEST_NOTE; the "median" is a number derived from the genome's hash so that the
archive has something to keep, not a timing. The store serves an earlier measurement only for the same GPU
name, so a load-test row can never be served as a result of a real run, and benchmarks.driver_load writes
its runs into a temporary directory it deletes.

The executors drive this backend exactly as they drive evo.evaluate.worker.GpuBackend: compile runs as the
executor's compile task (a Ray task for the Ray executor), `open_worker` is called once per "GPU" (in one
Ray actor each), and `evaluate` is the worker call of the pipeline's measure stage.

Recorded rates (the defaults), from the repository's reports:
- GPU: an H200 evaluated 9.95 GEMM candidates a second per GPU in the fastest real search
  (reports/bench/gemm-nvidia-h200.json: 796 evaluations of 16x4096x4096 in 40 s on 2 GPUs), 5.7-13.7 at the
  larger shapes, and 11.1 with compilation overlapped when measure_eval drove one worker
  (reports/gpu/measure-eval-h200.json: 668 per GPU-minute). Default: 0.1 s per candidate (10 a second).
- compile: 0.13-0.27 s per GEMM configuration on the GPU host (14 compile workers), 0.16-0.8 s on a 2-core
  CPU box (/work/shared/TRITON_NOTES.md). Default: uniform over 0.13-0.27 s, spent sleeping (the compile
  pool of a many-core GPU host) or burning this machine's CPU (`compile_cpu`, its own pool's capacity).
"""

from __future__ import annotations

import hashlib
import os
import time

from evo.evaluate.backend import Backend, Worker, WorkerInfo
from evo.evaluate.candidate import Candidate, CompileResult
from evo.problem import HOPPER, Target
from evo.store.record import Evaluation

__all__ = ["LOADTEST_GPU", "LOADTEST_NOTE", "LoadTestBackend", "LoadTestWorker", "H200_EVAL_S", "COMPILE_S",
           "is_loadtest"]

LOADTEST_GPU = "loadtest"
LOADTEST_NOTE = "LOAD TEST: a recorded evaluation time replayed on no GPU; the fitness is made up, not a timing"
LOADTEST_VERSIONS = {"mode": "loadtest"}
H200_EVAL_S = 0.1  # seconds a GPU holds one GEMM candidate (H200, reports/bench/gemm-nvidia-h200.json)
COMPILE_S = (0.13, 0.27)  # seconds per GEMM compile on the GPU host (TRITON_NOTES.md)


def is_loadtest(ev: Evaluation) -> bool:
    return ev.gpu == LOADTEST_GPU


def _unit(*parts: object) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def _busy(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class LoadTestBackend(Backend):
    """Fake GPU workers and compile stage for a driver load test (see the module's docstring).

    `eval_s`: mean seconds a worker holds a candidate (each draws uniformly from 0.5-1.5 times it);
    `compile_s`: (low, high) seconds of a compile, drawn uniformly, or None to skip the compile stage
    (CompileResult "ok" at once: only the task's round trip remains); `compile_cpu`: burn this machine's
    CPU for that long instead of sleeping."""

    needs_gpu = False

    def __init__(self, eval_s: float = H200_EVAL_S, compile_s: tuple[float, float] | None = COMPILE_S,
                 compile_cpu: bool = False, target: Target = HOPPER) -> None:
        if eval_s < 0:
            raise ValueError(f"eval_s must not be negative, got {eval_s}")
        self.eval_s = eval_s
        self.compile_s = compile_s
        self.compile_cpu = compile_cpu
        self.target = target

    def compile(self, cand: Candidate, target: Target) -> CompileResult | None:
        seconds = 0.0
        if self.compile_s is not None:
            low, high = self.compile_s
            seconds = low + (high - low) * _unit("compile", cand.source_hash)
            (_busy if self.compile_cpu else time.sleep)(seconds)
        return CompileResult("ok", "", {"kernels": 1}, compile_s=seconds, target=target,
                             worker=f"loadtest-compile:pid{os.getpid()}")

    def open_worker(self, device_index: int) -> Worker:
        return LoadTestWorker(self.eval_s, self.target)


class LoadTestWorker(Worker):
    """One fake GPU: holds each candidate for its recorded time (sleeping: a GPU's work costs the host no
    CPU), then returns a row marked as a load test."""

    def __init__(self, eval_s: float, target: Target = HOPPER) -> None:
        self.eval_s = eval_s
        self._info = WorkerInfo(f"loadtest:pid{os.getpid()}", LOADTEST_GPU, dict(LOADTEST_VERSIONS), target)
        self.evaluations = 0

    @property
    def info(self) -> WorkerInfo:
        return self._info

    def evaluate(self, cand: Candidate, timeout_s: float) -> Evaluation:
        started = time.time()
        time.sleep(self.eval_s * (0.5 + _unit("eval", cand.ticket, cand.genome.hash)))
        self.evaluations += 1
        made_up_ms = 0.2 * (1.0 + 2.0 * _unit("fitness", cand.genome.hash))  # NOT a timing
        return cand.row("ok", LOADTEST_NOTE, gpu=LOADTEST_GPU, versions=dict(LOADTEST_VERSIONS),
                        worker=self._info.name, median_ms=made_up_ms, spread_ms=0.0, times_ms=[],
                        baseline="loadtest", baseline_ms=0.2, baseline_spread_ms=0.0, max_rel_error=0.0,
                        started_at=started, finished_at=time.time())
