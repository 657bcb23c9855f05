"""The GPU worker: one child process per GPU holds the CUDA context, checks and times candidates; the
supervising object in the parent survives whatever the candidates do to it.

In the child, each candidate is checked on fresh random inputs (evo.evaluate.check), then timed interleaved
with the operator's primary baseline on the same inputs in the same process (evo.evaluate.timing); faults
become statuses (evo.evaluate.faults). An illegal address poisons the CUDA context: the child replies and exits.
In the parent, `ChildWorker` (shared with the CPU smoke worker, evo.evaluate.smoke) records a kernel that never
ends as a timeout and a child that died otherwise as crashed, and starts a new child in either case.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from evo.evaluate import clocks, timing
from evo.evaluate.backend import Backend, Worker, WorkerInfo
from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.check import run_check
from evo.evaluate.compiler import compile_candidate, forget_module, jit_functions, summarize
from evo.evaluate.faults import classify
from evo.evaluate.modules import load_source
from evo.evaluate.roofline import copy_bandwidth
from evo.evaluate.supervisor import ChildDied, ChildRaised, ChildTimeout, ExitAfter, Supervised
from evo.experiment.spec import EvaluationSpec
from evo.problem import Target
from evo.store.record import Evaluation

__all__ = ["GpuBackend", "ChildWorker", "GpuWorker", "GpuState", "gpu_setup", "gpu_evaluate",
           "visible_device"]


_COMPILE_NICENESS = 10  # of the processes that compile (GpuBackend.compile): below the GPU workers and the driver


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


# -- in the child process ----------------------------------------------------------------------------
class GpuState:
    """What the child keeps between candidates. `device="cpu"` exists only so tests can drive the child's
    code in the interpreter; a real worker is always on "cuda"."""

    def __init__(self, device_index: int, settings: EvaluationSpec, device: str = "cuda") -> None:
        import torch
        import triton

        self.device = device
        if device == "cuda":
            torch.cuda.init()
            torch.cuda.set_device(0)  # the only GPU this process sees
        self.settings = settings
        self.gpu = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
        self.versions = {"triton": triton.__version__, "torch": torch.__version__.split("+")[0],
                         "cuda": str(torch.version.cuda or ""), "timing": timing.PROTOCOL}
        # the machine's number of the GPU where this child sees only that one (a Ray actor's GPU is device 0 to it)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        self.worker = f"{socket.gethostname()}:gpu{visible if visible.isdigit() else device_index}:pid{os.getpid()}"
        self._baselines: dict[tuple[str, str], tuple[str, Callable[..., Any]]] = {}

    def baseline(self, operator: Any, problem: Any) -> tuple[str, Callable[..., Any]]:
        key = (operator.name, problem.key)
        if key not in self._baselines:
            primary = operator.baselines()[0]
            self._baselines[key] = (primary.name, primary.make(problem))
        return self._baselines[key]


def gpu_setup(device_index: int, settings: EvaluationSpec) -> tuple[GpuState, WorkerInfo]:
    import torch

    state = GpuState(device_index, settings)
    try:  # the speed-of-light floor's memory side (evo.evaluate.roofline), measured once per worker
        copy_GBps: float | None = copy_bandwidth("cuda", nbytes=1 << 28)
    except Exception:  # a GPU short of memory still searches; it only shows no floor
        copy_GBps = None
    torch.cuda.empty_cache()  # the copy's buffers go back to the device, not to this process's cache
    return state, WorkerInfo(state.worker, state.gpu, state.versions, Target.from_torch(0), copy_GBps)


def _context_ok(device: str) -> bool:
    import torch

    if device != "cuda":
        return True
    try:
        torch.cuda.synchronize()
        return float(torch.ones(1, device="cuda").add_(1).item()) == 2.0
    except Exception:
        return False


def _gpu_resources(module: Any, cand: Candidate) -> dict[str, Any]:
    """Resources as loaded on the GPU, and whether every kernel came from the compile-ahead cache."""
    kernels = [k for fn in jit_functions(module).values() for entry in getattr(fn, "device_caches", {}).values()
               for k in entry[0].values() if hasattr(k, "metadata")]
    loaded = [{"name": k.metadata.name, "hash": k.hash, "shared": int(k.metadata.shared),
               "registers": getattr(k, "n_regs", None), "spills": getattr(k, "n_spills", None)} for k in kernels]
    compiled = cand.compiled
    if compiled is not None and compiled.resources:
        resources = dict(compiled.resources)
        hit = bool(loaded) and all(k["hash"] in compiled.cache_hashes for k in loaded)
    else:
        resources, hit = summarize(loaded), None
    return dict(resources, gpu_kernels=loaded, cache_hit=hit)


def gpu_evaluate(state: GpuState, cand: Candidate) -> Evaluation | ExitAfter:
    """Check, then time, one candidate (its `seed` draws the check's inputs); a fault of it is its row."""
    operator = cand.operator
    baseline_name, baseline_fn = state.baseline(operator, cand.problem)
    phases: dict[str, Any] = {"seed": cand.seed}  # the row's resources["eval"]: the phases' times
    common: dict[str, Any] = {"gpu": state.gpu, "versions": state.versions, "worker": state.worker,
                              "started_at": time.time(), "baseline": baseline_name,
                              "resources": dict(cand.compiled.resources if cand.compiled else {}, eval=phases)}
    module, phase = None, "compile"
    try:
        t0 = time.perf_counter()
        module = load_source(cand.source)
        launcher = getattr(module, operator.entry)
        phase = "run"
        t1 = time.perf_counter()
        checked = run_check(launcher, operator, cand.problem, cand.seed or 0, device=state.device)
        t2 = time.perf_counter()
        phases.update(load_s=t1 - t0, check_s=t2 - t1)
        common["resources"] = dict(_gpu_resources(module, cand), eval=phases)
        if checked.status != "ok":
            return cand.row(checked.status, checked.reason, max_rel_error=checked.max_rel_error, **common)
        inputs, out = checked.inputs, checked.out
        run = (lambda: launcher(*inputs, out=out)) if checked.takes_out else (lambda: launcher(*inputs))
        base = lambda: baseline_fn(*inputs)
        s = state.settings
        # the baseline is timed with every candidate, interleaved, on the same inputs: the ratio is one process's
        measured, base_timing = timing.time_interleaved([run, base], reps=s.reps, warmup=s.warmup,
                                                        budget_ms=s.budget_ms, device=state.device)
        t3 = time.perf_counter()
        # the clocks a caller sees, both recorded whatever the objective, so that a row serves either objective
        # the user's clocks call the kernel as the baseline is called, allocating its result: what a user's code does
        as_called = lambda: launcher(*inputs)  # noqa: E731
        call, base_call = clocks.call_ms([as_called, base], device=state.device)
        host, base_host = clocks.host_us([as_called, base], device=state.device)
        phases.update(time_s=t3 - t2, clocks_s=time.perf_counter() - t3)
        return cand.row("ok", median_ms=measured.median_ms, spread_ms=measured.spread_ms, times_ms=measured.times_ms,
                        baseline_ms=base_timing.median_ms, baseline_spread_ms=base_timing.spread_ms,
                        call_ms=call, baseline_call_ms=base_call, host_us=host, baseline_host_us=base_host,
                        objective=s.objective, max_rel_error=checked.max_rel_error, **common)
    except Exception as exc:
        fault = classify(exc, phase=phase)
        fatal = fault.fatal or (phase == "run" and not _context_ok(state.device))
        status = "crashed" if fatal else fault.status
        reason = fault.reason if status == fault.status else f"CUDA context lost after: {fault.reason}"
        ev = cand.row(status, reason, **common)
        return ExitAfter(ev) if fatal else ev
    finally:
        if module is not None:  # loaded kernels stay alive only as long as their module
            forget_module(module)


# -- in the parent process ---------------------------------------------------------------------------
class ChildWorker(Supervised, Worker):
    """A Worker that is a supervised child whose setup returns its `WorkerInfo`. Each candidate gets a fresh seed
    for its check; after `recycle_after` evaluations a fresh child bounds what loaded kernels leak."""

    note = ""  # prefixes the reasons this supervisor writes (the smoke worker's say "smoke: ")

    def __init__(self, setup: Callable[..., Any], handler: Callable[[Any, Any], Any], *, seed: Any,
                 recycle_after: int = 2000, **supervision: Any) -> None:
        if recycle_after < 1:
            raise ValueError(f"recycle_after must be >= 1, got {recycle_after}")
        super().__init__(setup, handler, **supervision)
        self._rng = np.random.default_rng(seed)
        self.recycle_after = recycle_after

    @property
    def info(self) -> WorkerInfo:
        """Waits for a (re)started child: its start-up is never a candidate's time."""
        return self.wait_ready()

    def evaluate(self, cand: Candidate, timeout_s: float = 60.0) -> Evaluation:
        if self.served >= self.recycle_after:
            self.close()
        info = self.info
        cand = dataclasses.replace(cand, seed=int(self._rng.integers(0, 2**31 - 1)))
        common = {"gpu": info.gpu, "versions": dict(info.versions), "worker": info.name, "started_at": time.time()}
        try:
            return self.call(cand, timeout_s)
        except (ChildTimeout, ChildDied) as exc:
            status = "timeout" if isinstance(exc, ChildTimeout) else "crashed"
            return cand.row(status, f"{self.note}{exc}; worker replaced", **common)
        except ChildRaised as exc:
            fault = classify(str(exc))
            return cand.row("crashed" if exc.fatal else fault.status, f"{self.note}{fault.reason}", **common)


class GpuWorker(ChildWorker):
    """The supervised child that checks and times candidates on GPU `device_index`."""

    def __init__(self, device_index: int = 0, *, settings: EvaluationSpec | None = None, seed: int = 0,
                 cache_dir: str | None = None) -> None:
        env = {"CUDA_VISIBLE_DEVICES": visible_device(device_index), "TRITON_INTERPRET": "0"}
        if cache_dir:
            env["TRITON_CACHE_DIR"] = str(cache_dir)
        super().__init__(gpu_setup, gpu_evaluate, setup_args=(device_index, settings or EvaluationSpec()), env=env,
                         name=f"evo-gpu{device_index}", seed=[seed, device_index])


class GpuBackend(Backend):
    """Compile on CPUs (evo.evaluate.compiler), check and time on GPU workers: every fitness it returns is a
    GPU measurement. `cache_dir`: the TRITON_CACHE_DIR that compile processes and GPU workers share (None:
    Triton's). Heavy modules are imported in the processes that use them."""

    def __init__(self, evaluation: EvaluationSpec | None = None, seed: int = 0, cache_dir: str | None = None) -> None:
        self.evaluation = evaluation or EvaluationSpec()
        self.seed = seed
        self.cache_dir = cache_dir

    def compile_env(self) -> dict[str, str]:
        # Triton must not be in interpreter mode when a compile process imports it (a test session or a
        # smoke run may have set it for this one)
        return {"TRITON_INTERPRET": "0", **({"TRITON_CACHE_DIR": str(self.cache_dir)} if self.cache_dir else {})}

    def compile(self, cand: Candidate, target: Target) -> CompileResult | None:
        # compiles fill every CPU; a GPU worker or driver that waits for one leaves the GPU idle inside a timed
        # region (a 14 us kernel was once timed with an inter-quartile range of 29 us), so compiling runs niced
        if os.nice(0) < _COMPILE_NICENESS:
            os.nice(_COMPILE_NICENESS - os.nice(0))
        return compile_candidate(cand, target)  # it imports triton when it runs: in compile processes only

    def open_worker(self, device_index: int) -> Worker:
        worker = GpuWorker(device_index, seed=self.seed, cache_dir=self.cache_dir,
                           settings=self.evaluation)
        worker.info  # noqa: B018 - a GPU that cannot start fails here, not mid-run
        return worker
