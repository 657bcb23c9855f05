"""Evaluation: one pipeline (evo.evaluate.pipeline) of stages over one record (evo.evaluate.candidate):
render -> look up in the store -> compile (CPU) -> check -> time (GPU). Executors decide only where each stage
runs: in this process (`LocalExecutor`), or on Ray tasks and one actor per GPU (`RayExecutor`); the backend
decides what runs (a GPU measurement, or the CPU smoke check)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from evo.evaluate.backend import Backend, Worker, WorkerInfo
from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.executor import CompileChild, Executor, LocalExecutor
from evo.evaluate.pipeline import Lookup, make_candidate
from evo.evaluate.smoke import SmokeBackend
from evo.evaluate.worker import GpuBackend

if TYPE_CHECKING:
    from evo.experiment.spec import EvaluationSpec, ExecutorSpec

__all__ = ["Candidate", "CompileResult", "make_candidate", "Lookup", "Backend", "GpuBackend", "SmokeBackend",
           "Worker", "WorkerInfo", "Executor", "LocalExecutor", "CompileChild", "make_backend", "make_executor"]

KINDS = ("ray", "local", "smoke")


def make_backend(spec: ExecutorSpec, evaluation: EvaluationSpec, seed: int = 0) -> Backend:
    """What an experiment's executor kind evaluates with: the GPU measurement, or the CPU interpreter (smoke)."""
    if spec.kind not in KINDS:
        raise ValueError(f"unknown executor kind {spec.kind!r}; expected ray, local or smoke")
    return SmokeBackend(evaluation, seed) if spec.kind == "smoke" else GpuBackend(evaluation, seed)


def make_executor(spec: ExecutorSpec, backend: Backend, evaluation: EvaluationSpec | None = None,
                  lookup: Lookup | None = None) -> Executor:
    """kind "local": LocalExecutor; "ray" and "smoke": RayExecutor (smoke runs the same path on CPU workers)."""
    if spec.kind not in KINDS:
        raise ValueError(f"unknown executor kind {spec.kind!r}; expected ray, local or smoke")
    if spec.kind == "local":
        return LocalExecutor(backend, evaluation, lookup)
    from evo.evaluate.ray_executor import RayExecutor

    return RayExecutor(backend, spec, evaluation, lookup)
