"""Executors: where jobs are rendered and compiled (CPU) and evaluated (GPU), and how results come back.

The search talks to one interface: `submit` jobs (at most `slots` in flight), `poll` for finished
(job, evaluation) pairs, in whatever order they finish. `LocalExecutor` does everything in this process, one
job at a time (debugging, reproducibility). `RayExecutor` (evo.evaluate.ray_executor; Ray is imported only there)
compiles on CPU tasks ahead of time and evaluates on one actor per GPU. `make_executor` builds the one an
experiment asks for.

A job is rendered first; `lookup` may then serve it from an earlier measurement of the same rendered source
(same problem, GPU and versions) before anything is compiled: a kernel's source is measured once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any

from evo.evaluate.backend import Backend, Job, Ready, Worker, WorkerInfo, job_evaluation, served_from_store
from evo.experiment.spec import EvaluationSpec, ExecutorSpec
from evo.problem import HOPPER, Target
from evo.store.record import Evaluation

__all__ = ["Executor", "LocalExecutor", "Lookup", "make_executor", "make_backend"]

# (source_hash, problem_key, gpu, versions) -> an earlier measured Evaluation, or None; Store.lookup fits.
Lookup = Callable[[str, str, str, dict], "Evaluation | None"]


class Executor(ABC):
    def __init__(self, backend: Backend, evaluation: EvaluationSpec | None = None,
                 lookup: Lookup | None = None, target: Target | None = None) -> None:
        self.backend = backend
        self.evaluation = evaluation or EvaluationSpec()
        self.lookup = lookup
        self._target = target
        self.infos: list[WorkerInfo] = []

    # -- lifecycle ------------------------------------------------------------------------------------
    @abstractmethod
    def start(self) -> None:
        """Start the workers (and Ray, for the Ray executor); sets `infos`."""

    @abstractmethod
    def shutdown(self) -> None:
        """Stop everything this executor started; unfinished jobs are dropped."""

    def __enter__(self) -> Executor:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # -- work -----------------------------------------------------------------------------------------
    @property
    def target(self) -> Target:
        """What candidates are compiled for: given, else the first worker's device, else Hopper."""
        if self._target is not None:
            return self._target
        for info in self.infos:
            if info.target is not None:
                return info.target
        return HOPPER

    @property
    def workers(self) -> int:
        return len(self.infos)

    @property
    @abstractmethod
    def busy(self) -> int:
        """Workers evaluating a job right now."""

    @property
    @abstractmethod
    def slots(self) -> int:
        """How many jobs the search should keep in flight to keep every worker busy."""

    @property
    @abstractmethod
    def in_flight(self) -> int: ...

    @abstractmethod
    def submit(self, job: Job) -> None: ...

    @abstractmethod
    def poll(self, timeout_s: float | None = None) -> list[tuple[Job, Evaluation]]:
        """Finished jobs, waiting up to `timeout_s` (None: until one finishes) when none has yet.
        Returns [] when nothing is in flight."""

    @abstractmethod
    def cancel_waiting(self) -> list[Job]:
        """Drop the jobs that no worker has started yet (budget reached); returns them."""

    # -- shared by executors --------------------------------------------------------------------------
    def _named(self, ev: Evaluation) -> Evaluation:
        """A row made on the CPU side (a compile failure) names the GPU it was compiled for."""
        if not ev.gpu and self.infos:
            ev.gpu, ev.versions = self.infos[0].gpu, dict(self.infos[0].versions)
        return ev

    def _served(self, ready: Ready, info: WorkerInfo | None) -> Evaluation | None:
        if self.lookup is None or info is None:
            return None
        cached = self.lookup(ready.source_hash, ready.job.problem.key, info.gpu, info.versions)
        return served_from_store(ready.job, cached) if cached is not None else None

    def _render(self, job: Job) -> Ready | Evaluation:
        """Render `job`; its result already when it cannot be rendered or its source was measured before (on
        the first worker's GPU: one search assumes one kind of GPU). A Ready job still needs compiling."""
        try:
            ready = self.backend.render(job, self.target)
        except Exception as e:  # a backend should classify its faults; one it missed must not stop the search
            return self._named(job_evaluation(job, "error", f"render raised {type(e).__name__}: {e}"))
        if isinstance(ready, Evaluation):
            return self._named(ready)
        served = self._served(ready, self.infos[0] if self.infos else None)
        return served if served is not None else ready


class LocalExecutor(Executor):
    """Everything in this process, one job at a time, in submission order: the order of results is the order
    of jobs, so a seeded search with this executor is reproducible."""

    def __init__(self, backend: Backend, evaluation: EvaluationSpec | None = None,
                 lookup: Lookup | None = None, target: Target | None = None, device_index: int = 0) -> None:
        super().__init__(backend, evaluation, lookup, target)
        self.device_index = device_index
        self._worker: Worker | None = None
        self._queue: deque[Job] = deque()

    def start(self) -> None:
        if self._worker is None:
            self._worker = self.backend.open_worker(self.device_index)
            self.infos = [self._worker.info]

    def shutdown(self) -> None:
        self._queue.clear()
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.close()

    @property
    def busy(self) -> int:
        return 0  # work happens inside poll(); between calls nothing runs

    @property
    def slots(self) -> int:
        return 1

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def submit(self, job: Job) -> None:
        if self._worker is None:
            raise RuntimeError("executor not started")
        self._queue.append(job)

    def poll(self, timeout_s: float | None = None) -> list[tuple[Job, Evaluation]]:
        if not self._queue or self._worker is None:
            return []
        job = self._queue.popleft()
        ready = self._render(job)
        if isinstance(ready, Evaluation):
            return [(job, ready)]
        try:
            compiled = self.backend.compile(ready, self.target)
        except Exception as e:
            compiled = job_evaluation(job, "error", f"compile raised {type(e).__name__}: {e}", ready.source_hash)
        if isinstance(compiled, Evaluation):
            return [(job, self._named(compiled))]
        info = self._worker.info
        try:
            ev = self._worker.evaluate(compiled, self.evaluation.timeout_s)
        except Exception as e:
            ev = job_evaluation(job, "error", f"worker raised {type(e).__name__}: {e}",
                                source_hash=compiled.source_hash, gpu=info.gpu, worker=info.name)
        return [(job, ev)]

    def cancel_waiting(self) -> list[Job]:
        dropped = list(self._queue)
        self._queue.clear()
        return dropped


def make_backend(operator: str, overrides: dict[str, list[Any]], spec: ExecutorSpec,
                 evaluation: EvaluationSpec, seed: int = 0) -> Backend:
    """The backend an experiment's executor kind needs: the GPU evaluator, or the CPU interpreter (smoke)."""
    if spec.kind == "smoke":
        from evo.evaluate.smoke_backend import SmokeBackend

        return SmokeBackend(operator, overrides, evaluation, seed)
    if spec.kind in ("ray", "local"):
        from evo.evaluate.evaluator_backend import EvaluatorBackend

        return EvaluatorBackend(operator, overrides, evaluation, seed)
    raise ValueError(f"unknown executor kind {spec.kind!r}; expected ray, local or smoke")


def make_executor(spec: ExecutorSpec, backend: Backend, evaluation: EvaluationSpec | None = None,
                  lookup: Lookup | None = None, target: Target | None = None) -> Executor:
    """kind "local": LocalExecutor; "ray" and "smoke": RayExecutor (smoke runs the same path on CPU workers)."""
    if spec.kind == "local":
        return LocalExecutor(backend, evaluation, lookup, target)
    if spec.kind in ("ray", "smoke"):
        from evo.evaluate.ray_executor import RayExecutor

        return RayExecutor(backend, spec, evaluation, lookup, target)
    raise ValueError(f"unknown executor kind {spec.kind!r}; expected ray, local or smoke")
