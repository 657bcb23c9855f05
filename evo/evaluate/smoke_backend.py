"""The backend of CPU smoke runs (executor kind "smoke"): the same render and compile-ahead path as a real
run, then evo.evaluate.smoke's interpreter check with a fitness that is a model estimate, NOT a timing (every row
says so: gpu "cpu-interpreter"). For checking a set-up on a machine without a GPU, never for results.
"""

from __future__ import annotations

from typing import Any

from evo.evaluate.backend import ChildWorker, Worker, WorkerInfo
from evo.evaluate.evaluator_backend import EvaluatorBackend
from evo.experiment.spec import EvaluationSpec
from evo.problem import HOPPER, Target

__all__ = ["SmokeBackend", "SmokeWorkerAdapter"]


class SmokeWorkerAdapter(ChildWorker):
    def __init__(self, target: Target, seed: int) -> None:
        from evo.evaluate.smoke import SMOKE_GPU, SmokeWorker

        self.worker = SmokeWorker(target=target, seed=seed)
        info = self.worker.info  # starts the child now, not on the first job
        self._info = WorkerInfo(str(info.get("worker", "smoke")), SMOKE_GPU, dict(info["versions"]), target)


class SmokeBackend(EvaluatorBackend):
    """Compiles for `target` (Hopper by default) on CPUs like a real run; workers are CPU interpreters."""

    needs_gpu = False

    def __init__(self, operator: str, overrides: dict[str, list[Any]] | None = None,
                 evaluation: EvaluationSpec | None = None, seed: int = 0, target: Target = HOPPER) -> None:
        super().__init__(operator, overrides, evaluation, seed)
        self.target = target

    def open_worker(self, device_index: int) -> Worker:
        return SmokeWorkerAdapter(self.target, self.seed)
