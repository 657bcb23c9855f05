"""A pool of compile worker processes that compiles candidates ahead of the GPU.

Each worker is a supervised child (evo.evaluate.supervisor): a compile that hangs is killed at its time limit
(status timeout), a compiler that aborts the process (LLVM and MLIR assertions do) becomes a compile_error
of that candidate, and the worker is replaced; no other compile is lost, unlike a ProcessPoolExecutor
whose whole pool breaks when one worker dies. `submit` returns a concurrent.futures.Future.
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from typing import Any

from evo.evaluate.candidate import Candidate, Prepared
from evo.evaluate.compiler import DEFAULT_MAX_SPILL_BYTES, CompileResult, compile_candidate
from evo.evaluate.supervisor import ChildDied, ChildRaised, ChildTimeout, Supervised
from evo.problem import HOPPER, Target

__all__ = ["CompilePool", "compile_setup", "compile_handle"]


def compile_setup(target: Target, operators: dict[str, Any], max_spill_bytes: int | None) -> tuple[dict, dict]:
    import triton

    state = {"target": target, "operators": dict(operators), "max_spill_bytes": max_spill_bytes}
    return state, {"pid": os.getpid(), "triton": triton.__version__}


def compile_handle(state: dict[str, Any], candidate: Candidate) -> CompileResult:
    return compile_candidate(candidate, state["target"], operator=state["operators"].get(candidate.problem.operator),
                             max_spill_bytes=state["max_spill_bytes"])


class CompilePool:
    """`workers` compile processes for `target`. Thread-safe: submit from any thread."""

    def __init__(self, workers: int | None = None, *, target: Target = HOPPER, timeout_s: float = 120.0,
                 cache_dir: str | None = None, operators: dict[str, Any] | None = None,
                 max_spill_bytes: int | None = DEFAULT_MAX_SPILL_BYTES, recycle_after: int | None = 500,
                 start_timeout_s: float = 300.0) -> None:
        workers = workers if workers is not None else max(1, (os.cpu_count() or 2) - 1)
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        if recycle_after is not None and recycle_after < 1:
            raise ValueError(f"recycle_after must be >= 1 or None, got {recycle_after}")
        self.target, self.timeout_s, self.recycle_after = target, timeout_s, recycle_after
        env = {"TRITON_INTERPRET": "0"}  # compile workers need real JIT functions, whatever the parent runs
        if cache_dir:
            env["TRITON_CACHE_DIR"] = str(cache_dir)
        self._queue: queue.Queue[tuple[Candidate, Future] | None] = queue.Queue()
        self._children = [Supervised(compile_setup, compile_handle, env=env, name=f"evo-compile{i}",
                                     setup_args=(target, dict(operators or {}), max_spill_bytes),
                                     start_timeout_s=start_timeout_s) for i in range(workers)]
        self._threads = [threading.Thread(target=self._serve, args=(c,), daemon=True, name=f"evo-compile{i}")
                         for i, c in enumerate(self._children)]
        self._closed = False
        for child in self._children:
            child.start()  # all start-ups overlap
        for t in self._threads:
            t.start()

    @property
    def workers(self) -> int:
        return len(self._children)

    @property
    def restarts(self) -> int:
        return sum(max(0, c.starts - 1) for c in self._children)

    def submit(self, candidate: Candidate) -> Future:
        if self._closed:
            raise RuntimeError("the compile pool is closed")
        future: Future = Future()
        self._queue.put((candidate, future))
        return future

    def compile(self, candidate: Candidate) -> CompileResult:
        return self.submit(candidate).result()

    def prepare(self, candidate: Candidate) -> Prepared:
        return Prepared(candidate, self.compile(candidate))

    def _serve(self, child: Supervised) -> None:
        served = 0
        while True:
            job = self._queue.get()
            if job is None:
                return
            candidate, future = job
            if not future.set_running_or_notify_cancel():
                continue
            if self.recycle_after is not None and served >= self.recycle_after:
                child.close()  # a long-lived compiler process only grows; a fresh one is cheap
                served = 0
            served += 1
            try:
                result = self._compile_in(child, candidate)
            except BaseException as exc:  # the future must always complete
                future.set_exception(exc)
                continue
            future.set_result(result)

    def _compile_in(self, child: Supervised, candidate: Candidate) -> CompileResult:
        try:
            return child.call(candidate, self.timeout_s)
        except ChildTimeout as exc:
            return CompileResult("timeout", f"compile: {exc}", compile_s=self.timeout_s, target=self.target)
        except ChildDied as exc:
            return CompileResult("compile_error", f"the compiler process died: {exc}", target=self.target)
        except ChildRaised as exc:
            from evo.evaluate.faults import classify

            fault = classify(f"{exc.kind}: {exc.message}", phase="compile")
            return CompileResult(fault.status, fault.reason, target=self.target)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        while True:  # what has not started is cancelled, not compiled
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[1].cancel()
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join(timeout=self.timeout_s + 30)
        for child in self._children:
            child.close()

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
