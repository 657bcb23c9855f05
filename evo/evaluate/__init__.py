"""Evaluation: one pipeline (evo.evaluate.pipeline) of stages over one record (evo.evaluate.candidate):
render -> look up in the store -> compile (CPU) -> check -> time (GPU). Executors decide only where each stage
runs: in this process (`LocalExecutor`), or on Ray tasks and one actor per GPU (`RayExecutor`); the backend
decides what runs (a GPU measurement, or the CPU smoke check)."""

from __future__ import annotations

from evo.evaluate.backend import Backend, Worker, WorkerInfo
from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.executor import CompileChild, Executor, LocalExecutor
from evo.evaluate.pipeline import Lookup, make_candidate
from evo.evaluate.smoke import SmokeBackend
from evo.evaluate.worker import GpuBackend
from evo.experiment.spec import EvaluationSpec, ExecutorSpec

__all__ = ["Candidate", "CompileResult", "make_candidate", "Lookup", "Backend", "GpuBackend", "SmokeBackend",
           "Worker", "WorkerInfo", "Executor", "LocalExecutor", "CompileChild", "make_executor"]


def make_executor(spec: ExecutorSpec, evaluation: EvaluationSpec, seed: int = 0, lookup: Lookup | None = None,
                  cache_dir: str | None = None, ray_log: str | None = None) -> Executor:
    """An experiment's executor. kind "local": LocalExecutor; "ray": RayExecutor; "smoke": the Ray executor's path
    on CPU workers, checking in the interpreter (SmokeBackend: its fitness is not a timing). `cache_dir`: the
    Triton compile cache its compile processes and GPU workers share (None: Triton's default). `ray_log`: the file
    that what Ray prints goes to (None: the terminal)."""
    if spec.kind not in ("ray", "local", "smoke"):
        raise ValueError(f"unknown executor kind {spec.kind!r}; expected ray, local or smoke")
    backend = (SmokeBackend(evaluation, seed) if spec.kind == "smoke"
               else GpuBackend(evaluation, seed, cache_dir=cache_dir))
    if spec.kind == "local":
        return LocalExecutor(backend, evaluation, lookup)
    from evo.evaluate.ray_executor import RayExecutor

    return RayExecutor(backend, spec, evaluation, lookup, ray_log=ray_log)
