"""The GPU worker: one child process per GPU holds the CUDA context, checks and times candidates; a
supervisor object in the parent survives whatever the candidates do to it.

In the child, each candidate is first checked on fresh random inputs (evo.evaluate.check), then timed interleaved
with the operator's primary baseline on the same inputs in the same process (evo.evaluate.timing). Faults become
statuses (evo.evaluate.faults). An illegal address poisons the CUDA context: the child replies and exits, and the
supervisor starts a new one. A kernel that never ends is killed with its process when the time limit
passes (status timeout). Whatever kills the child otherwise, the candidate it was on is recorded as crashed.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evo.evaluate.candidate import Candidate, Prepared
from evo.evaluate.supervisor import ChildDied, ChildRaised, ChildTimeout, ExitAfter, Supervised
from evo.evaluate.timing import PROTOCOL as TIMING_PROTOCOL
from evo.store.record import Evaluation

__all__ = ["GpuWorker", "GpuState", "EvalSettings", "EvalRequest", "gpu_setup", "gpu_evaluate", "visible_device"]


@dataclass(frozen=True)
class EvalSettings:
    reps: int = 30  # timed repetitions of each of candidate and baseline (fewer when slow: evo.evaluate.timing)
    warmup: int = 3
    budget_ms: float = 400.0  # GPU time the timing of one candidate (with its baseline) aims at
    operators: dict[str, Any] = field(default_factory=dict)  # name -> Operator, for operators not in the registry

    def __post_init__(self) -> None:
        if self.reps < 1 or self.warmup < 0 or self.budget_ms <= 0:
            raise ValueError(f"bad evaluation settings: {self}")


@dataclass(frozen=True)
class EvalRequest:
    prepared: Prepared
    seed: int  # inputs of the check are drawn from it: a fresh seed for every evaluation


def visible_device(device_index: int) -> str:
    """The CUDA_VISIBLE_DEVICES value that shows a child only GPU `device_index` of this process's GPUs."""
    if device_index < 0:
        raise ValueError(f"device_index must be >= 0, got {device_index}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return str(device_index)
    ids = [x.strip() for x in visible.split(",") if x.strip()]
    if device_index >= len(ids):
        raise ValueError(f"device_index {device_index} but CUDA_VISIBLE_DEVICES={visible!r} shows {len(ids)} GPUs")
    return ids[device_index]


# ------------------------------------------------------------------------------------------------------
# In the child process
# ------------------------------------------------------------------------------------------------------
class GpuState:
    """What the child keeps between candidates. `device="cpu"` exists only so tests can drive the child's
    code in the interpreter; a real worker is always on "cuda"."""

    def __init__(self, device_index: int, settings: EvalSettings, device: str = "cuda") -> None:
        import torch
        import triton

        self.device = device
        if device == "cuda":
            torch.cuda.init()
            torch.cuda.set_device(0)  # the only GPU this process sees
        self.settings = settings
        self.gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
        self.versions = {"triton": triton.__version__, "torch": torch.__version__.split("+")[0],
                         "cuda": str(torch.version.cuda or ""), "timing": TIMING_PROTOCOL}
        self.worker = f"{socket.gethostname()}:gpu{device_index}:pid{os.getpid()}"
        self._operators: dict[str, Any] = dict(settings.operators)
        self._baselines: dict[str, tuple[str, Callable[..., Any]]] = {}

    def operator(self, name: str) -> Any:
        if name not in self._operators:
            import operators

            self._operators[name] = operators.get(name)
        return self._operators[name]

    def baseline(self, operator: Any, problem: Any) -> tuple[str, Callable[..., Any]]:
        if problem.key not in self._baselines:
            primary = operator.baselines()[0]
            self._baselines[problem.key] = (primary.name, primary.make(problem))
        return self._baselines[problem.key]


def gpu_setup(device_index: int, settings: EvalSettings) -> tuple[GpuState, dict[str, Any]]:
    from evo.problem import Target

    state = GpuState(device_index, settings)
    return state, {"gpu": state.gpu, "versions": state.versions, "worker": state.worker, "pid": os.getpid(),
                   "target": Target.from_torch(0)}


def _context_ok(device: str) -> bool:
    import torch

    if device != "cuda":
        return True
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").add_(1).item()) == 2.0
    except Exception:
        return False


def _loaded_kernels(module: Any) -> list[Any]:
    from evo.evaluate.compiler import jit_functions

    kernels = []
    for fn in jit_functions(module).values():
        for entry in getattr(fn, "device_caches", {}).values():
            kernels.extend(k for k in entry[0].values() if hasattr(k, "metadata"))
    return kernels


def _gpu_resources(module: Any, prepared: Prepared) -> dict[str, Any]:
    """Resources as loaded on the GPU, and whether every kernel came from the compile-ahead cache."""
    kernels = _loaded_kernels(module)
    loaded = [{"name": k.metadata.name, "hash": k.hash, "shared": int(k.metadata.shared),
               "registers": getattr(k, "n_regs", None), "spills": getattr(k, "n_spills", None)} for k in kernels]
    compiled = prepared.compiled
    if compiled is not None and compiled.resources:
        resources = dict(compiled.resources)
        hit = bool(loaded) and all(k["hash"] in compiled.cache_hashes for k in loaded)
    else:
        from evo.evaluate.compiler import summarize

        resources, hit = summarize(loaded), None
    resources["gpu_kernels"] = loaded
    resources["cache_hit"] = hit
    return resources


def gpu_evaluate(state: GpuState, request: EvalRequest) -> Evaluation | ExitAfter:
    """Check, then time, one candidate. Never raises for a fault of the candidate."""
    from evo.evaluate.check import run_check
    from evo.evaluate.faults import classify
    from evo.evaluate.modules import load_source
    from evo.evaluate.timing import time_interleaved

    prepared, cand = request.prepared, request.prepared.candidate
    compiled = prepared.compiled
    started = time.time()
    operator = state.operator(cand.problem.operator)
    baseline_name, baseline_fn = state.baseline(operator, cand.problem)
    common: dict[str, Any] = {
        "gpu": state.gpu, "versions": state.versions, "worker": state.worker, "started_at": started,
        "baseline": baseline_name, "compile_s": compiled.compile_s if compiled else None,
        "resources": dict(compiled.resources) if compiled else {},
    }
    phases: dict[str, Any] = {"seed": request.seed}
    module = None
    phase = "compile"
    try:
        t0 = time.perf_counter()
        module = load_source(cand.source)
        launcher = getattr(module, operator.entry)
        phase = "run"
        t1 = time.perf_counter()
        checked = run_check(launcher, operator, cand.problem, request.seed, device=state.device)
        t2 = time.perf_counter()
        phases.update(load_s=t1 - t0, check_s=t2 - t1)
        common["resources"] = _gpu_resources(module, prepared)
        if checked.status != "ok":
            return cand.evaluation(checked.status, checked.reason, max_rel_error=checked.max_rel_error,
                                   **_finish(common, phases))
        inputs, out = checked.inputs, checked.out
        run = (lambda: launcher(*inputs, out=out)) if checked.takes_out else (lambda: launcher(*inputs))
        base = lambda: baseline_fn(*inputs)
        s = state.settings
        # the baseline is timed with every candidate, interleaved, on the same inputs: the ratio is one process's
        timing, base_timing = time_interleaved([run, base], reps=s.reps, warmup=s.warmup, budget_ms=s.budget_ms,
                                              device=state.device)
        phases.update(time_s=time.perf_counter() - t2)
        return cand.evaluation("ok", median_ms=timing.median_ms, spread_ms=timing.spread_ms, times_ms=timing.times_ms,
                               baseline_ms=base_timing.median_ms, baseline_spread_ms=base_timing.spread_ms,
                               max_rel_error=checked.max_rel_error, **_finish(common, phases))
    except Exception as exc:
        fault = classify(exc, phase=phase)
        fatal = fault.fatal or (phase == "run" and not _context_ok(state.device))
        status = "crashed" if fatal else fault.status
        reason = fault.reason if status == fault.status else f"CUDA context lost after: {fault.reason}"
        ev = cand.evaluation(status, reason, **_finish(common, phases))
        return ExitAfter(ev) if fatal else ev
    finally:
        if module is not None:  # loaded kernels stay alive only as long as their module
            from evo.evaluate.compiler import forget_module

            forget_module(module)


def _finish(common: dict[str, Any], phases: dict[str, Any]) -> dict[str, Any]:
    out = dict(common)
    out["resources"] = dict(out["resources"], eval=phases)
    out["finished_at"] = time.time()
    return out


# ------------------------------------------------------------------------------------------------------
# In the parent process
# ------------------------------------------------------------------------------------------------------
class GpuWorker:
    """Supervisor of the child process that evaluates candidates on GPU `device_index`.

    `evaluate` always returns an Evaluation: a candidate that hangs the GPU is recorded as timeout, one
    that kills the process as crashed, and the child is replaced before the next candidate. `setup` and
    `handler` replace the GPU code (tests use stand-ins); `recycle_after` evaluations start a fresh child
    to bound what loaded kernels leak.
    """

    def __init__(self, device_index: int = 0, *, settings: EvalSettings | None = None, seed: int = 0,
                 cache_dir: str | None = None, setup: Callable[..., Any] | None = None,
                 handler: Callable[[Any, Any], Any] | None = None, setup_args: tuple[Any, ...] | None = None,
                 start_timeout_s: float = 300.0, recycle_after: int | None = 2000) -> None:
        if recycle_after is not None and recycle_after < 1:
            raise ValueError(f"recycle_after must be >= 1 or None, got {recycle_after}")
        self.device_index = device_index
        self.settings = settings or EvalSettings()
        env = {"CUDA_VISIBLE_DEVICES": visible_device(device_index), "TRITON_INTERPRET": "0"}
        if cache_dir:
            env["TRITON_CACHE_DIR"] = str(cache_dir)
        args = setup_args if setup_args is not None else (device_index, self.settings)
        self._child = Supervised(setup or gpu_setup, handler or gpu_evaluate, setup_args=args, env=env,
                                 name=f"evo-gpu{device_index}", start_timeout_s=start_timeout_s)
        self._rng = np.random.default_rng([seed, device_index])
        self.recycle_after = recycle_after
        self._served_by_child = 0
        self.evaluated = 0

    def start(self) -> None:
        self._child.start()

    @property
    def info(self) -> dict[str, Any]:
        return self._child.info()

    @property
    def gpu(self) -> str:
        return self.info["gpu"]

    @property
    def versions(self) -> dict[str, str]:
        return self.info["versions"]

    @property
    def restarts(self) -> int:
        return max(0, self._child.starts - 1)

    @property
    def pid(self) -> int | None:
        return self._child.pid

    def evaluate(self, item: Prepared | Candidate, timeout_s: float = 60.0) -> Evaluation:
        prepared = item if isinstance(item, Prepared) else Prepared(item)
        cand = prepared.candidate
        info = self.info  # waits for a (re)started child: its start-up is not the candidate's time
        if self.recycle_after is not None and self._served_by_child >= self.recycle_after:
            self._child.close()
            self._served_by_child = 0
            info = self.info
        request = EvalRequest(prepared, int(self._rng.integers(0, 2**31 - 1)))
        started = time.time()
        common = {"gpu": info["gpu"], "versions": info["versions"], "worker": info.get("worker", ""),
                  "started_at": started, "compile_s": prepared.compiled.compile_s if prepared.compiled else None,
                  "resources": dict(prepared.compiled.resources) if prepared.compiled else {}}
        self._served_by_child += 1
        self.evaluated += 1
        try:
            ev = self._child.call(request, timeout_s)
        except ChildTimeout as exc:
            self._served_by_child = 0
            return cand.evaluation("timeout", f"{exc}; worker replaced", finished_at=time.time(), **common)
        except ChildDied as exc:
            self._served_by_child = 0
            return cand.evaluation("crashed", f"{exc}; worker replaced", finished_at=time.time(), **common)
        except ChildRaised as exc:
            from evo.evaluate.faults import classify

            fault = classify(f"{exc.kind}: {exc.message}")
            status = "crashed" if exc.fatal else fault.status
            if exc.fatal:
                self._served_by_child = 0
            return cand.evaluation(status, fault.reason, finished_at=time.time(), **common)
        if not isinstance(ev, Evaluation):
            return cand.evaluation("error", f"worker replied with {type(ev).__name__}, not an Evaluation",
                                   finished_at=time.time(), **common)
        if ev.status == "crashed":
            self._served_by_child = 0
        return ev

    def close(self) -> None:
        self._child.close()

    def __enter__(self) -> GpuWorker:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
