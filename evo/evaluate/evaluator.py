"""The evaluator: one call per candidate, from the store if it was measured before, else compiled (when
not compiled ahead) and evaluated on the GPU worker; every new result is stored the moment it exists.

This is what the search calls from its per-GPU actor: `Evaluator.evaluate(item) -> Evaluation`,
synchronous, one candidate at a time. A measurement is served again only for the same kernel source,
problem, GPU name and versions (triton, torch, cuda), and only for statuses that are a property of the
kernel (evo.store.record.MEASURED); `remeasure=True` always measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from evo.evaluate.candidate import Candidate, Prepared
from evo.evaluate.compiler import CompileResult
from evo.store.record import Evaluation
from evo.store.sqlite import Store

__all__ = ["Evaluator", "EvaluationWorker", "failed_compile"]


class EvaluationWorker(Protocol):
    """What the evaluator needs of a worker: GpuWorker, or the CPU smoke worker."""

    @property
    def gpu(self) -> str: ...

    @property
    def versions(self) -> dict[str, str]: ...

    def evaluate(self, item: Prepared | Candidate, timeout_s: float = 60.0) -> Evaluation: ...


def failed_compile(prepared: Prepared, gpu: str, versions: dict[str, str]) -> Evaluation:
    """The row of a candidate rejected at compile time (it never reaches a GPU)."""
    c = prepared.compiled
    if c is None or c.status == "ok":
        raise ValueError("failed_compile() takes a candidate whose compilation failed")
    return prepared.candidate.evaluation(c.status, c.reason, gpu=gpu, versions=versions, resources=dict(c.resources),
                                         compile_s=c.compile_s, worker=c.worker)


class Evaluator:
    """Glue between candidates, a worker and a store.

    `compile` (optional) compiles a candidate that arrives without a compile result, e.g.
    `CompilePool.compile`; without it such a candidate goes straight to the worker, which compiles it on
    first launch (no static resource check then, resources are read from the loaded kernels).
    """

    def __init__(self, worker: EvaluationWorker, store: Store | None = None, *,
                 compile: Callable[[Candidate], CompileResult] | None = None, remeasure: bool = False,
                 timeout_s: float = 60.0, run_id: str = "") -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.worker, self.store, self.compile = worker, store, compile
        self.remeasure, self.timeout_s, self.run_id = remeasure, timeout_s, run_id
        self.served = 0  # answered from the store
        self.measured = 0  # evaluated on the worker
        self.rejected = 0  # stopped at compile time
        self.last_served = False

    def cached(self, candidate: Candidate) -> Evaluation | None:
        """The stored measurement of this exact candidate on this worker's GPU and versions, if any."""
        if self.store is None or self.remeasure:
            return None
        return self.store.lookup(candidate.source_hash, candidate.problem.key, self.worker.gpu, self.worker.versions)

    def evaluate(self, item: Prepared | Candidate) -> Evaluation:
        prepared = item if isinstance(item, Prepared) else Prepared(item)
        hit = self.cached(prepared.candidate)
        self.last_served = hit is not None
        if hit is not None:
            self.served += 1
            return hit
        if prepared.compiled is None and self.compile is not None:
            prepared = Prepared(prepared.candidate, self.compile(prepared.candidate))
        if prepared.ready:
            ev = self.worker.evaluate(prepared, self.timeout_s)
            self.measured += 1
        else:
            ev = failed_compile(prepared, self.worker.gpu, self.worker.versions)
            self.rejected += 1
        return self._keep(ev)

    def _keep(self, ev: Evaluation) -> Evaluation:
        if self.run_id and not ev.run_id:
            ev.run_id = self.run_id
        if not ev.finished_at:
            ev.finished_at = time.time()
        if self.store is not None:
            self.store.add(ev)
        return ev

    def stats(self) -> dict[str, Any]:
        return {"served": self.served, "measured": self.measured, "rejected": self.rejected}
