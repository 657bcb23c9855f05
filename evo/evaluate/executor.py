"""Executors: where the pipeline's stages (evo.evaluate.pipeline) run, and how results come back.

The search keeps up to `slots` candidates in flight: it `submit`s them and `poll`s for finished (candidate,
evaluation) pairs, in whatever order they finish. `LocalExecutor` runs every stage from this process, one candidate
at a time; `RayExecutor` (evo.evaluate.ray_executor) compiles on CPU tasks and measures on one actor per GPU. Both
render and look up in the store here, first.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from evo.evaluate import pipeline
from evo.evaluate.backend import Backend, Worker, WorkerInfo
from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.faults import classify
from evo.evaluate.occupancy import Occupancy
from evo.evaluate.pipeline import Lookup
from evo.evaluate.supervisor import ChildDied, ChildRaised, ChildTimeout, Supervised
from evo.experiment.spec import EvaluationSpec
from evo.problem import HOPPER, Target
from evo.store.record import Evaluation

__all__ = ["Executor", "LocalExecutor", "CompileChild", "WorkersLost"]


class WorkersLost(RuntimeError):
    """No worker is left to evaluate on (each died repeatedly); what completed is in the store."""


class Executor(ABC):
    busy: int  # workers evaluating a candidate right now
    slots: int  # candidates the search keeps in flight so that every worker stays busy
    in_flight: int  # submitted, not yet handed back by poll
    occupancy: Occupancy | None = None  # how full each pipeline stage was (executors with stages of their own)

    def __init__(self, backend: Backend, evaluation: EvaluationSpec | None = None,
                 lookup: Lookup | None = None) -> None:
        self.backend = backend
        self.evaluation = evaluation or EvaluationSpec()
        self.lookup = lookup
        self.infos: list[WorkerInfo] = []

    @abstractmethod
    def start(self) -> None:
        """Start the workers (and Ray, for the Ray executor); sets `infos`."""

    @abstractmethod
    def shutdown(self) -> None:
        """Stop everything this executor started; unfinished candidates are dropped."""

    @abstractmethod
    def submit(self, cand: Candidate) -> None: ...

    @abstractmethod
    def poll(self, timeout_s: float | None = None) -> list[tuple[Candidate, Evaluation]]:
        """Finished candidates, waiting up to `timeout_s` (None: until one finishes) when none has yet.
        Returns [] when nothing is in flight."""

    @abstractmethod
    def cancel_waiting(self) -> list[Candidate]:
        """Drop the candidates that no worker has started yet (budget reached); returns them."""

    def __enter__(self) -> Executor:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    @property
    def target(self) -> Target:
        """What candidates are compiled for: the first worker's device, else Hopper."""
        return next((i.target for i in self.infos if i.target is not None), HOPPER)

    @property
    def workers(self) -> int:
        return len(self.infos)

    def _named(self, ev: Evaluation) -> Evaluation:
        """A row made on the CPU side (a compile failure) names the GPU it was compiled for."""
        if not ev.gpu and self.infos:
            ev.gpu, ev.versions = self.infos[0].gpu, dict(self.infos[0].versions)
        return ev

    def _render(self, cand: Candidate) -> Evaluation | None:
        """Stages 1 and 2: the candidate's row when it cannot be rendered or was measured before, else None."""
        first = self.infos[0] if self.infos else None
        ev = pipeline.render(cand, self.target) or pipeline.look_up(cand, self.lookup, first,
                                                                     self.evaluation.objective)
        return self._named(ev) if ev is not None else None


class CompileChild(Supervised):
    """The compile stage in a supervised child process started with the backend's `compile_env`: a compile
    that hangs is killed at its time limit (status timeout), a compiler that aborts the process (LLVM and
    MLIR assertions do) becomes a compile_error of that candidate, and the child is replaced."""

    def __init__(self, backend: Backend, target: Target = HOPPER, timeout_s: float = 120.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        super().__init__(_compile_setup, _compile_handle, setup_args=(backend, target), env=backend.compile_env(),
                         name="evo-compile")
        self.target, self.timeout_s = target, timeout_s

    def compile(self, cand: Candidate) -> CompileResult | None:
        try:
            return self.call(cand, self.timeout_s)
        except ChildTimeout as exc:
            return CompileResult("timeout", f"compile: {exc}", compile_s=self.timeout_s, target=self.target)
        except ChildDied as exc:
            return CompileResult("compile_error", f"the compiler process died: {exc}", target=self.target)
        except ChildRaised as exc:
            fault = classify(str(exc), phase="compile")
            return CompileResult(fault.status, fault.reason, target=self.target)


def _compile_setup(backend: Backend, target: Target) -> tuple[tuple[Backend, Target], None]:
    return (backend, target), None


def _compile_handle(state: tuple[Backend, Target], cand: Candidate) -> CompileResult | None:
    backend, target = state
    return backend.compile(cand, target)


class LocalExecutor(Executor):
    """Every stage from this process, one candidate at a time, in submission order: the order of results is
    the order of candidates, so a seeded search with this executor is reproducible. A backend that names a
    compile environment compiles in a supervised child (CompileChild)."""

    busy = 0  # work happens inside poll(); between calls nothing runs
    slots = 1

    def __init__(self, backend: Backend, evaluation: EvaluationSpec | None = None,
                 lookup: Lookup | None = None) -> None:
        super().__init__(backend, evaluation, lookup)
        self._worker: Worker | None = None
        self._compiler: CompileChild | None = None
        self._queue: list[Candidate] = []

    @property
    def in_flight(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        if self._worker is None:
            self._worker = self.backend.open_worker(0)
            self.infos = [self._worker.info]
            if self.backend.compile_env():
                self._compiler = CompileChild(self.backend, self.target, self.evaluation.compile_timeout_s)

    def shutdown(self) -> None:
        self._queue.clear()
        for part in (self._compiler, self._worker):
            if part is not None:
                part.close()
        self._worker = self._compiler = None

    def submit(self, cand: Candidate) -> None:
        if self._worker is None:
            raise RuntimeError("executor not started")
        self._queue.append(cand)

    def poll(self, timeout_s: float | None = None) -> list[tuple[Candidate, Evaluation]]:
        if not self._queue or self._worker is None:
            return []
        cand = self._queue.pop(0)
        ev = self._render(cand)
        if ev is None:
            if self._compiler is not None:
                ev = pipeline.compiled(cand, self._compiler.compile(cand))
            else:
                ev = pipeline.compile_here(self.backend, cand, self.target)
            ev = self._named(ev) if ev is not None else pipeline.measure(self._worker, cand, self.evaluation.timeout_s)
        return [(cand, ev)]

    def cancel_waiting(self) -> list[Candidate]:
        dropped, self._queue = self._queue, []
        return dropped
