"""Compiling a candidate ahead of time, on a CPU, for a GPU target: the static half of an evaluation.

`compile_candidate` (picklable in, picklable out) runs in a compile worker process (a Ray task, or the local
executor's compile child): it writes the rendered module, finds exactly which kernels the launcher launches
for the problem, compiles each for the target GPU, reads shared memory, registers and spills, and rejects
what cannot fit the target.

Finding the launches: every module-global `JITFunction` is swapped for a recorder while the launcher runs
on the operator's inputs made on the "meta" device (no data, real shapes and dtypes). Each recorded call is
then replayed through the kernel's own `JITFunction.run(..., warmup=True)` under a stand-in Triton driver
that reports the target GPU: the path a launch on the GPU takes, so Triton itself computes the
specialisation (pointer alignment, integers divisible by 16 or equal to 1, constexprs, launch options) and
hence its cache key, alike in Triton 3.6 and 3.9. The GPU worker's first launch then loads the cubin from
the shared TRITON_CACHE_DIR (by default ~/.triton/cache) instead of compiling again.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
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
    from triton.runtime.jit import JITFunction

    return {name: obj for name, obj in vars(module).items() if isinstance(obj, JITFunction)}


def forget_module(module: ModuleType) -> None:
    """Let a rendered module and its compiled kernels be freed: a worker process lives for thousands of
    candidates. (Triton 3.9 keeps every JITFunction in a registry, and unloads a kernel's GPU module when
    the CompiledKernel is collected; 3.6 has neither, hence GpuWorker's recycling.)"""
    from triton.runtime import jit

    registry = getattr(jit, "_triton_jit_function_registry", {})
    for fn in jit_functions(module).values():
        registry.pop(f"{fn.module}:{fn.fn.__qualname__}", None)
        getattr(fn, "device_caches", {}).clear()
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


@contextlib.contextmanager
def _target_driver(target: Target):
    """Stands in for Triton's driver with just enough for `JITFunction.run(warmup=True)`: the device is the
    target itself (so kernels compiled for two targets in one process keep separate in-memory caches)."""
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    gpu_target = GPUTarget("cuda", target.arch, target.warp_size)
    previous = getattr(driver, "_active", None)
    driver.set_active(SimpleNamespace(
        get_current_device=lambda: ("evo-target", gpu_target.backend, gpu_target.arch, gpu_target.warp_size),
        get_current_stream=lambda device=None: 0,
        get_current_target=lambda: gpu_target,
        get_active_torch_device=lambda: torch.device("meta"),
    ))
    try:
        yield
    finally:
        # not reset_active(): on a machine without a GPU, creating the default driver raises
        driver._active = previous


def _inputs(candidate: Candidate) -> tuple[Any, ...]:
    """The operator's inputs on the meta device (shapes and dtypes, no data); tensors on the CPU when the
    operator cannot make meta ones (pointer alignment is the same: both allocators align to >= 16 bytes)."""
    try:
        return tuple(candidate.operator.make_inputs(candidate.problem, 0, device="meta"))
    except Exception:
        return tuple(candidate.operator.make_inputs(candidate.problem, 0, device="cpu"))


@contextlib.contextmanager
def _environment(**values: str):
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


def compile_candidate(candidate: Candidate, target: Target) -> CompileResult:
    """Compile and judge `candidate` for `target` in any process that has not run the Triton interpreter."""
    import triton
    import triton.language as tl

    started = time.perf_counter()
    result = CompileResult("ok", target=target, triton_version=triton.__version__, worker=f"pid{os.getpid()}")
    if getattr(tl.core.tensor.__mul__, "__module__", "") == "triton.runtime.interpreter":
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
            launches = record_launches(module, launcher, _inputs(candidate))
            # the ptxas log is not part of the cache key and is printed only when ptxas really runs
            log = io.StringIO()
            with _environment(TRITON_DUMP_PTXAS_LOG="1"), _target_driver(target), contextlib.redirect_stdout(log):
                kernels = [launch.fn.run(*launch.args, grid=launch.grid, warmup=True, **launch.kwargs)
                           for launch in launches]
    except Exception as exc:  # every fault of a candidate becomes a result, never a dead worker
        fault = classify(exc, phase="compile")
        result.status, result.reason = fault.status, fault.reason
    else:
        per_kernel: dict[str, dict[str, Any]] = {}  # by hash: a launcher may launch one kernel several times
        for k in kernels:
            info = kernel_resources(k, log.getvalue())
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
        return max((k[key] for k in per_kernel if k.get(key) is not None), default=None)

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
