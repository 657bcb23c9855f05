"""What evaluates: the compile stage (run on a CPU) and the workers that check and time (one per device).

A `Backend` is plain picklable data, so an executor can ship it to CPU tasks and GPU actors: GpuBackend
(evo.evaluate.worker) measures on GPUs, SmokeBackend (evo.evaluate.smoke) checks in the CPU interpreter.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from evo.evaluate.candidate import Candidate, CompileResult
from evo.problem import Target
from evo.store.record import Evaluation

__all__ = ["WorkerInfo", "Worker", "Backend"]


@dataclass(frozen=True)
class WorkerInfo:
    name: str  # e.g. "host:gpu0:pid123"
    gpu: str  # device name as it is written into Evaluation.gpu
    versions: dict[str, str] = field(default_factory=dict)
    target: Target | None = None  # what CPU workers compile for; None: the executor's default (Hopper)
    copy_GBps: float | None = None  # copy bandwidth measured at start-up (GPU workers; None: no real floor)


class Worker(ABC):
    """Checks and times rendered (and compiled) candidates on one device. Turns every fault into a row."""

    @property
    @abstractmethod
    def info(self) -> WorkerInfo: ...

    @abstractmethod
    def evaluate(self, cand: Candidate, timeout_s: float) -> Evaluation: ...

    def close(self) -> None:  # noqa: B027 - releasing the device (child processes) is optional
        pass


class Backend(ABC):
    needs_gpu: bool = True  # False: workers run on CPUs (smoke runs, tests)

    def compile_env(self) -> dict[str, str]:
        """Environment variables the processes that run `compile` must start with."""
        return {}

    def compile(self, cand: Candidate, target: Target) -> CompileResult | None:
        """Compile a rendered candidate ahead of time for `target` (on a CPU). None: nothing is compiled
        ahead, the worker compiles on first launch."""
        return None

    @abstractmethod
    def open_worker(self, device_index: int) -> Worker:
        """A worker on device `device_index` as this process sees it (0 inside a Ray actor owning one GPU)."""
