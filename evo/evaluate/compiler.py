"""Compiling a candidate ahead of time, on a CPU, for a GPU target: the static half of an evaluation.

`compile_candidate` is a pure function (picklable in, picklable out) meant to run in a compile worker
process (a Ray task, or the local executor's compile child): it writes the rendered module, finds out
exactly which kernels the launcher would launch for the problem, compiles each for the target GPU, reads
shared memory, registers and spills, and rejects what cannot fit the target.

Finding the launches: every module-global `JITFunction` is swapped for a recorder while the launcher runs
on the operator's inputs made on the "meta" device (no data, real shapes and dtypes). Each recorded call is
then replayed through the kernel's own `JITFunction.run(..., warmup=True)` with a stand-in Triton driver
that reports the target GPU. That path is the one a launch on the GPU takes, so the specialisation
(pointer alignment, integers divisible by 16 or equal to 1, constexprs, launch options) and hence the key
of Triton's on-disk cache are computed by Triton itself, identically in Triton 3.6 and 3.9: the GPU
worker's first launch then loads the cubin from the shared TRITON_CACHE_DIR instead of compiling again.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.faults import classify
from evo.evaluate.modules import load_source
from evo.evaluate.resources import kernel_resources
from evo.problem import Target

__all__ = ["Launch", "compile_candidate", "record_launches", "jit_functions", "forget_module", "MAX_SPILL_BYTES"]

# Spilling a few registers costs little; beyond this many bytes of stack frame (spill space) per thread the
# kernel is bound by its own local-memory traffic and not worth a GPU's time.
MAX_SPILL_BYTES = 2048


@dataclass(frozen=True)
class Launch:
    """One `kernel[grid](*args, **kwargs)` call made by a launcher."""

    fn: Any  # the JITFunction
    grid: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


def jit_functions(module: ModuleType) -> dict[str, Any]:
    """Module-global names bound to Triton JIT functions (the kernels a launcher can launch)."""
    from triton.runtime.jit import JITFunction

    return {name: obj for name, obj in vars(module).items() if isinstance(obj, JITFunction)}


def forget_module(module: ModuleType) -> None:
    """Let a rendered module and its compiled kernels be freed: a worker process lives for thousands of
    candidates. (Triton 3.9 keeps every JITFunction in a registry, and unloads a kernel's GPU module when
    the CompiledKernel is collected; 3.6 has neither, hence GpuWorker's recycling.)"""
    from triton.runtime import jit

    registry = getattr(jit, "_triton_jit_function_registry", None)
    for fn in jit_functions(module).values():
        if isinstance(registry, dict):
            registry.pop(f"{fn.module}:{fn.fn.__qualname__}", None)
        caches = getattr(fn, "device_caches", None)
        if hasattr(caches, "clear"):
            caches.clear()
    sys.modules.pop(module.__name__, None)


class _Recorder:
    def __init__(self, fn: Any, calls: list[Launch]) -> None:
        self._fn, self._calls = fn, calls

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return lambda *args, **kwargs: self._calls.append(Launch(self._fn, grid, args, dict(kwargs)))

    def __getattr__(self, name: str) -> Any:  # fn.arg_names, fn.fn ... still answer
        return getattr(self._fn, name)


def record_launches(module: ModuleType, launcher: Callable[..., Any], inputs: tuple[Any, ...]) -> list[Launch]:
    """The kernel launches `launcher(*inputs)` makes, without running any kernel."""
    kernels = jit_functions(module)
    if not kernels:
        raise ValueError(f"module {module.__name__} defines no @triton.jit kernel (is TRITON_INTERPRET set?)")
    calls: list[Launch] = []
    try:
        for name, fn in kernels.items():
            setattr(module, name, _Recorder(fn, calls))
        launcher(*inputs)
    finally:
        for name, fn in kernels.items():
            setattr(module, name, fn)
    if not calls:
        raise ValueError(f"the launcher of {module.__name__} launched no kernel")
    return calls


class _TargetDriver:
    """Just enough of a Triton driver for `JITFunction.run(warmup=True)`: the device is the target itself
    (so kernels compiled for two targets in one process keep separate in-memory caches)."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def get_current_device(self) -> Any:
        return ("evo-target", self._target.backend, self._target.arch, self._target.warp_size)

    def get_current_stream(self, device: Any = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self._target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("meta")


@contextlib.contextmanager
def _driver_for(gpu_target: Any):
    from triton.runtime.driver import driver

    previous = getattr(driver, "_active", None)
    driver.set_active(_TargetDriver(gpu_target))
    try:
        yield
    finally:
        # not reset_active(): on a machine without a GPU, creating the default driver raises
        driver._active = previous


def compile_launches(launches: list[Launch], target: Target) -> tuple[list[Any], str]:
    """Compile each recorded launch for `target`; returns the CompiledKernels and the captured ptxas log."""
    from triton.backends.compiler import GPUTarget

    gpu_target = GPUTarget("cuda", target.arch, target.warp_size)
    log = io.StringIO()
    # the ptxas log is not part of the cache key and is printed only when ptxas really runs
    with _environment(TRITON_DUMP_PTXAS_LOG="1"), _driver_for(gpu_target), contextlib.redirect_stdout(log):
        kernels = [launch.fn.run(*launch.args, grid=launch.grid, warmup=True, **launch.kwargs) for launch in launches]
    return kernels, log.getvalue()


def _inputs(candidate: Candidate) -> tuple[Any, ...]:
    """The operator's inputs on the meta device (shapes and dtypes, no data); tensors on the CPU when the
    operator cannot make meta ones (pointer alignment is the same: both allocators align to >= 16 bytes)."""
    try:
        return tuple(candidate.operator.make_inputs(candidate.problem, 0, device="meta"))
    except Exception:
        return tuple(candidate.operator.make_inputs(candidate.problem, 0, device="cpu"))


@contextlib.contextmanager
def _environment(**values: str):
    """Set environment variables for the duration of one compile."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def interpreter_has_run() -> bool:
    """True once the Triton interpreter has patched triton.language in this process (it never undoes it)."""
    import triton.language as tl

    return getattr(tl.core.tensor.__mul__, "__module__", "") == "triton.runtime.interpreter"


def compile_candidate(candidate: Candidate, target: Target) -> CompileResult:
    """Compile every kernel `candidate`'s launcher launches for its problem, for `target`, and judge them.

    Meant for a compile worker process (a Ray task, or the local executor's compile child); it may run in any
    process that has not run the Triton interpreter, since it sets TRITON_INTERPRET=0 while it works. It
    compiles into TRITON_CACHE_DIR, which the GPU worker must share (by default both use ~/.triton/cache).
    """
    import triton

    started = time.perf_counter()
    result = CompileResult("ok", target=target, triton_version=triton.__version__, worker=f"pid{os.getpid()}")
    if interpreter_has_run():
        result.status = "error"
        result.reason = ("this process has run the Triton interpreter, which patches triton.language for the rest "
                         "of its life; compile in a fresh process (evo.evaluate.executor.CompileChild)")
        return result
    entry, module = candidate.operator.entry, None
    try:  # real JITFunctions are needed, whatever this process otherwise runs (tests run the interpreter)
        with _environment(TRITON_INTERPRET="0"):
            module = load_source(candidate.source)
            if not jit_functions(module):  # imported earlier by this process under the interpreter
                sys.modules.pop(module.__name__, None)
                module = load_source(candidate.source)
            launcher = getattr(module, entry, None)
            if launcher is None:
                raise ValueError(f"rendered module has no launcher named {entry!r}")
            kernels, log = compile_launches(record_launches(module, launcher, _inputs(candidate)), target)
    except Exception as exc:  # every fault of a candidate becomes a result, never a dead worker
        fault = classify(exc, phase="compile")
        result.status, result.reason = fault.status, fault.reason
    else:
        per_kernel: dict[str, dict[str, Any]] = {}  # by hash: a launcher may launch one kernel several times
        for k in kernels:
            info = kernel_resources(k, log)
            per_kernel.setdefault(info["hash"], info)
        result.cache_hashes = list(per_kernel)
        result.resources = summarize(list(per_kernel.values()))
        result.status, result.reason = judge(result.resources, target)
    finally:
        if module is not None:
            forget_module(module)
    result.compile_s = time.perf_counter() - started
    return result


def summarize(per_kernel: list[dict[str, Any]]) -> dict[str, Any]:
    """Resources of a candidate: the largest of its kernels' (what limits occupancy), plus each kernel's."""
    def largest(key: str) -> int | None:
        values = [k[key] for k in per_kernel if k.get(key) is not None]
        return max(values) if values else None

    return {"shared": largest("shared") or 0, "registers": largest("registers"), "spills": largest("spills"),
            "kernels": per_kernel}


def judge(resources: dict[str, Any], target: Target) -> tuple[str, str]:
    """Statically reject what cannot run (shared memory beyond the target) or will not run well (heavy spills)."""
    for k in resources.get("kernels", []):
        if k["shared"] > target.smem_bytes:
            return "out_of_resources", (f"{k['name']}: shared memory {k['shared']} B exceeds the "
                                        f"{target.smem_bytes} B a block may use on {target.name}")
        if (k.get("spills") or 0) > MAX_SPILL_BYTES:
            return "out_of_resources", (f"{k['name']}: a stack frame of {k['spills']} B per thread (register "
                                        f"spills) exceeds the limit of {MAX_SPILL_BYTES} B "
                                        f"({k.get('registers')} registers, {k.get('spill_stores')} B spill stores)")
    return "ok", ""
