"""The backend of real runs: evo's compiler on CPU workers, evo's GpuWorker (a supervised child process per
GPU) for checking and timing. Every fitness it returns is a GPU measurement.

Everything heavy is imported inside methods: this module is loaded by the driver, which needs neither
torch nor a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from evo.evaluate.backend import Backend, ChildWorker, Job, Ready, Worker, WorkerInfo, job_evaluation
from evo.experiment.spec import EvaluationSpec
from evo.problem import Target
from evo.store.record import Evaluation

__all__ = ["EvaluatorBackend", "GpuWorkerAdapter", "probe_target"]

_OPERATORS: dict[str, Any] = {}  # per process: operators are cheap, but not free to build for every job


def operator_for(name: str, overrides: dict[str, list[Any]]) -> Any:
    key = json.dumps([name, overrides], sort_keys=True, default=str)
    if key not in _OPERATORS:
        import operators

        _OPERATORS[key] = operators.get(name, overrides)
    return _OPERATORS[key]


def render(job: Job, target: Target, operator_name: str, overrides: dict[str, list[Any]]) -> Any:
    """evo's Candidate for `job`, or a failed Evaluation when the genome cannot even be rendered."""
    from evo.evaluate.candidate import make_candidate
    from evo.evaluate.faults import classify
    from genomes.base import InvalidGenome

    try:
        return make_candidate(operator_for(operator_name, overrides), job.genome, job.problem, target,
                              origin=job.origin, parents=job.parents)
    except InvalidGenome as e:
        return job_evaluation(job, "invalid", str(e))
    except Exception as e:  # a render bug is a fault of this candidate, not of the search
        fault = classify(e, phase="compile")
        return job_evaluation(job, fault.status, f"render failed: {fault.reason}")


def probe_target(device_index: int = 0) -> Target:
    """The Target of GPU `device_index`, read in a short-lived process so that this one (a GPU worker's
    supervisor) never holds a CUDA context of its own."""
    from evo.evaluate.worker import visible_device

    code = ("import json; from evo.problem import Target; t = Target.from_torch(0); "
            "print(json.dumps([t.name, t.arch, t.smem_bytes, t.num_sms, t.warp_size]))")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=visible_device(device_index))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"cannot read the properties of GPU {device_index}: {out.stderr.strip()[-500:]}")
    name, arch, smem, sms, warp = json.loads(out.stdout.strip().splitlines()[-1])
    return Target(name, int(arch), int(smem), int(sms), int(warp))


class GpuWorkerAdapter(ChildWorker):
    def __init__(self, device_index: int, evaluation: EvaluationSpec, seed: int) -> None:
        from evo.evaluate.worker import EvalSettings, GpuWorker

        self.worker = GpuWorker(device_index, settings=EvalSettings(reps=evaluation.reps, warmup=evaluation.warmup),
                                seed=seed)
        info = self.worker.info  # starts the child: a GPU that cannot start fails here, not mid-run
        target = info.get("target")
        if not isinstance(target, Target):
            target = probe_target(device_index)
        self._info = WorkerInfo(str(info.get("worker", f"gpu{device_index}")), str(info["gpu"]),
                                dict(info["versions"]), target)


class EvaluatorBackend(Backend):
    """Render and compile on CPUs (evo.evaluate.compiler), check and time on GPUs (evo.evaluate.worker.GpuWorker)."""

    needs_gpu = True

    def __init__(self, operator: str, overrides: dict[str, list[Any]] | None = None,
                 evaluation: EvaluationSpec | None = None, seed: int = 0) -> None:
        self.operator = operator
        self.overrides = dict(overrides or {})
        self.evaluation = evaluation or EvaluationSpec()
        self.seed = seed

    def compile_env(self) -> dict[str, str]:
        # Triton must not be in interpreter mode when it is imported by a compile process (a test session or a
        # smoke run may have set it for this one)
        return {"TRITON_INTERPRET": "0"}

    def render(self, job: Job, target: Target) -> Ready | Evaluation:
        from evo.evaluate.candidate import Prepared

        candidate = render(job, target, self.operator, self.overrides)
        if isinstance(candidate, Evaluation):
            return candidate
        return Ready(job, candidate.source_hash, Prepared(candidate))

    def compile(self, ready: Ready, target: Target) -> Ready | Evaluation:
        from evo.evaluate.candidate import Prepared
        from evo.evaluate.compiler import compile_candidate
        from evo.evaluate.evaluator import failed_compile

        candidate = ready.payload.candidate
        compiled = compile_candidate(candidate, target, operator=operator_for(self.operator, self.overrides))
        prepared = Prepared(candidate, compiled)
        if not prepared.ready:
            return failed_compile(prepared, gpu="", versions={})  # the executor names the GPU it was meant for
        return Ready(ready.job, ready.source_hash, prepared)

    def open_worker(self, device_index: int) -> Worker:
        return GpuWorkerAdapter(device_index, self.evaluation, self.seed)
