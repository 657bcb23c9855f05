"""What an executor runs: the narrow interface between the search and the evaluator.

The search hands an executor `Job`s (a genome for a problem, with its origin and parents). A `Backend`
does the work in three steps: `render` (cheap, in the search's process), `compile` ahead of time on a CPU
worker (a failure already is an Evaluation), and a `Worker` per GPU that checks and times a compiled job.
Backends are plain picklable objects, so the Ray executor can ship them to CPU tasks and GPU actors; the
real one wraps evo's evaluator, the smoke one the CPU interpreter, and tests bring their own.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from evo.problem import Problem, Target
from evo.store.record import Evaluation
from genomes.base import Genome

__all__ = ["Job", "Ready", "WorkerInfo", "Backend", "Worker", "job_evaluation", "served_from_store"]


@dataclass(frozen=True)
class Job:
    ticket: int  # unique within a run session: results come back out of order, keyed by it
    problem: Problem
    genome: Genome
    origin: str = ""
    parents: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ready:
    """A job prepared on a CPU and fit for a GPU worker. `payload` is the backend's own (e.g. evo's Prepared)."""

    job: Job
    source_hash: str
    payload: Any = None


@dataclass(frozen=True)
class WorkerInfo:
    name: str  # e.g. "gpu0@host"
    gpu: str  # device name as it is written into Evaluation.gpu
    versions: dict[str, str] = field(default_factory=dict)
    target: Target | None = None  # what CPU workers compile for; None: the backend does not compile


class Worker(ABC):
    """Checks and times prepared jobs on one device. Must turn every fault into an Evaluation."""

    @property
    @abstractmethod
    def info(self) -> WorkerInfo: ...

    @abstractmethod
    def evaluate(self, ready: Ready, timeout_s: float) -> Evaluation: ...

    def close(self) -> None:
        """Release the device (stop child processes). Nothing to release by default."""
        return None


class ChildWorker(Worker):
    """A Worker over one of evo's supervised child-process workers (evo.evaluate.worker.GpuWorker,
    evo.evaluate.smoke.SmokeWorker): subclasses start `self.worker` and set `self._info` in their constructor."""

    worker: Any
    _info: WorkerInfo

    @property
    def info(self) -> WorkerInfo:
        return self._info

    def evaluate(self, ready: Ready, timeout_s: float) -> Evaluation:
        return self.worker.evaluate(ready.payload, timeout_s)

    def close(self) -> None:
        self.worker.close()


class Backend(ABC):
    needs_gpu: bool = True  # False: workers run on CPUs (smoke runs, tests)

    @abstractmethod
    def render(self, job: Job, target: Target) -> Ready | Evaluation:
        """The job's kernel source (cheap: runs in the search's process, so that a source measured before
        is served from the store without compiling it again); an Evaluation when it cannot be rendered."""

    def compile_env(self) -> dict[str, str]:
        """Environment variables the processes that run `compile` must start with."""
        return {}

    def compile(self, ready: Ready, target: Target) -> Ready | Evaluation:
        """Compile a rendered job ahead of time for `target` (on a CPU worker); an Evaluation when that
        failed. By default nothing is compiled ahead: the worker compiles on first launch."""
        return ready

    @abstractmethod
    def open_worker(self, device_index: int) -> Worker:
        """A worker on device `device_index` as this process sees it (0 inside a Ray actor owning one GPU)."""


def job_evaluation(job: Job, status: str, reason: str = "", source_hash: str = "", **fields: Any) -> Evaluation:
    """An Evaluation row for `job` built by the engine itself (e.g. a worker that died under it)."""
    now = time.time()
    fields.setdefault("started_at", now)
    fields.setdefault("finished_at", now)
    return Evaluation(operator=job.problem.operator, problem_key=job.problem.key, problem=job.problem.to_json(),
                      genome=job.genome.canonical(), genome_hash=job.genome.hash, source_hash=source_hash,
                      status=status, reason=reason, origin=job.origin, parents=list(job.parents), **fields)


def served_from_store(job: Job, cached: Evaluation) -> Evaluation:
    """A new row for `job` whose rendered source was measured before: the measurement is reused, the genome,
    origin and parents are the job's. `worker` says where it came from."""
    now = time.time()
    return dataclasses.replace(cached, genome=job.genome.canonical(), genome_hash=job.genome.hash,
                               origin=job.origin, parents=list(job.parents), run_id="", id=None,
                               worker=f"store#{cached.id}", started_at=now, finished_at=now)
