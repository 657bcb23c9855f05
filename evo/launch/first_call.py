"""The first call of each argument signature of an evo op, run where no CUDA graph memory pool takes its allocations.

Why: an evo kernel's first call of a new argument signature makes its launch plan, and the plan keeps device memory
for as long as it lives: a split-K workspace and its arrival counters (operators/linear/kernel.py, the gemm and
row-wise split launchers), the bound kernel's global scratch (evo/launch/runtime.py). torch.compile's
mode="reduce-overhead" (CUDA-graph trees, as transformers' generate() uses with a static cache) runs each new graph
once eagerly to warm it up, with every allocation of the current thread routed into the graph's private pool
(torch >= 2.8: `_cuda_beginAllocateCurrentThreadToPool`), and then refuses any tensor left alive in that pool that is
not one of the graph's outputs: "Detected N tensor(s) in the cudagraph pool not tracked as outputs". A plan made
during that warm-up put its workspace there.

The fix at the one place every compiled evo op passes (evo.api.as_torch_op's implementation, which a compiled graph
calls): a signature's first call runs on a helper thread, which the pool's routing does not follow, on the CALLER's
stream (so its launches keep their order with the caller's work) and with the caller's device and grad/inference
mode; the output stays the caller's (allocated by the caller, in the pool where the graph expects it). Everything
the plan keeps is then ordinary memory; later calls of that signature allocate nothing but their outputs. The other
ways considered: an allocation helper at each plan's workspace would change every rendered kernel's text (and keeps
the bound kernel's scratch and any future plan state to be remembered at each new site); warming each op up before
compile needs the shapes generate() will use, which only the run knows; workspaces as op arguments change every
operator's schema. Under a stream capture (torch.cuda.graph, or a CUDA-graph tree's recording) the call runs in
place as before: capture owns the allocations then, and the plan's memory belongs to that graph's pool, which the
graph keeps alive. On the CPU (Triton's interpreter) nothing changes.

The same check also caught a plan that kept a tensor of the call that made it (linear's plan without a split held
that call's x in its workspace's place: an activation inside the pool); no thread helps there, so plans keep none
(operators/linear/kernel.py, tests/operators/linear/test_plan_refs.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from evo.launch.runtime import signature as tensor_signature

__all__ = ["FirstCalls", "signature"]


def signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a launch plan may depend on, per argument: a tensor's key as the launch runtime makes it
    (evo.launch.runtime.signature: shape, strides, dtype, device, 16-byte alignment); another value's type and
    value."""
    return tuple(tensor_signature(a) if isinstance(a, torch.Tensor)
                 else (type(a), a if isinstance(a, (int, float, bool, str, type(None))) else id(a)) for a in args)


class FirstCalls:
    """Remembers the argument signatures already called; `run(fn, args)` calls fn() on a helper thread for a new
    signature of CUDA tensors outside a stream capture (see the module docstring), else in place."""

    def __init__(self) -> None:
        self._seen: set[tuple[Any, ...]] = set()
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any], args: tuple[Any, ...]) -> Any:
        cuda = next((a.device for a in args if isinstance(a, torch.Tensor) and a.is_cuda), None)
        if cuda is None:
            return fn()
        key = signature(args)
        if key in self._seen or torch.cuda.is_current_stream_capturing():
            return fn()
        result = outside_graph_pools(fn, cuda)
        with self._lock:
            self._seen.add(key)
        return result


def outside_graph_pools(fn: Callable[[], Any], device: torch.device) -> Any:
    """fn() on a helper thread with the caller's CUDA device, current stream, grad and inference mode: what it
    allocates comes from the ordinary caching allocator, not from a graph pool the caller's thread allocates into.
    Whatever fn raises is raised here."""
    stream = torch.cuda.current_stream(device)
    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            with torch.cuda.device(device), torch.cuda.stream(stream), torch.inference_mode(inference), \
                    torch.set_grad_enabled(grad):
                # A new thread has no current CUDA context until it makes a runtime call: Triton's host tensor
                # descriptors (driver calls) failed there on an H200 with "invalid device context". A device
                # synchronize binds the primary context (once per new argument signature, outside any capture).
                torch.cuda.synchronize(device)
                box["result"] = fn()
        except BaseException as e:  # handed to the caller's thread, raised there
            box["error"] = e

    thread = threading.Thread(target=work, name="evo-first-call", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["result"]
