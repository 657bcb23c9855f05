"""Measuring contenders for one problem side by side: in one process, on one device, on the same inputs.

Each contender is set up (its first call: autotuning, compiling; timed apart as `setup_s`), then checked
against the operator's reference by the search's own check (evo.evaluate.check.check_launcher: a NaN-poisoned
output, both calls judged, inputs that must stay untouched), and only if correct timed — all correct
contenders together, interleaved, through one timer (evo.evaluate.timing.time_interleaved on a GPU). Anything a
contender raises becomes its status and reason; nothing is dropped silently.

Given `clocks` (on a GPU: `user_clocks`), the correct contenders are then measured, interleaved too, on the
clocks a caller sees (evo.evaluate.clocks): per-call time of back-to-back eager calls, per-call time under
CUDA-graph replay (None for a contender that cannot be captured) and host µs of one call.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evo.evaluate.check import check_launcher
from evo.evaluate.roofline import copy_bandwidth, peak_tflops
from evo.problem import Problem
from evo.store.sqlite import Store

__all__ = ["Entrant", "ContenderResult", "Timer", "Clocks", "measure_contenders", "user_clocks", "copy_bandwidth",
           "peak_tflops", "search_summary"]

# (list of zero-argument callables, reps=, warmup=, budget_ms=) -> list of objects with median_ms, spread_ms
Timer = Callable[..., list[Any]]
# (list of zero-argument callables) -> per callable {"call_ms": ..., "graph_ms": ..., "host_us": ...} (None: unknown)
Clocks = Callable[[list[Callable[[], Any]]], list[dict[str, float | None]]]
CLOCK_KEYS = ("call_ms", "graph_ms", "host_us")


@dataclass(frozen=True)
class Entrant:
    """A contender to measure: `make(problem)` returns a callable over the operator's inputs."""

    name: str
    make: Callable[[Problem], Callable[..., Any]]
    doc: str = ""


@dataclass
class ContenderResult:
    name: str
    status: str = "skipped"  # ok | wrong | skipped
    reason: str = ""
    doc: str = ""
    setup_s: float | None = None
    max_rel_error: float | None = None
    median_ms: float | None = None
    spread_ms: float | None = None
    reps: int | None = None
    call_ms: float | None = None  # back-to-back eager calls, per call
    graph_ms: float | None = None  # CUDA-graph replay, per call; None also when it cannot be captured
    host_us: float | None = None  # host time of one call
    fn: Callable[..., Any] | None = None  # the set-up callable (not written out)

    def to_json(self) -> dict[str, Any]:
        out = {"status": self.status, "reason": self.reason, "doc": self.doc, "setup_s": self.setup_s,
               "max_rel_error": self.max_rel_error, "median_ms": self.median_ms, "spread_ms": self.spread_ms,
               "reps": self.reps, "call_ms": self.call_ms, "graph_ms": self.graph_ms, "host_us": self.host_us}
        # a graph clock missing beside a measured call clock is a finding (not capturable): it stays, as null
        keep = {"graph_ms"} if self.call_ms is not None else set()
        return {k: v for k, v in out.items() if k in keep or v not in (None, "")}


def _one_line(e: BaseException, limit: int = 300) -> str:
    text = " ".join(f"{type(e).__name__}: {e}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _sync(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def _setup_and_check(entrant: Entrant, problem: Problem, inputs: tuple[Any, ...], ref: Any, tol: float,
                     device: str, written: Callable[..., Any] | None = None) -> ContenderResult:
    res = ContenderResult(entrant.name, doc=entrant.doc)
    try:
        fn = entrant.make(problem)
    except Exception as e:  # unavailable here: a missing package, a compiler that refuses, ...
        res.reason = f"unavailable: {_one_line(e)}"
        return res
    start = time.perf_counter()
    try:
        fn(*inputs)  # first call: autotuning / compilation happens here
        _sync(device)
        res.setup_s = round(time.perf_counter() - start, 3)
        # the search's own check (evo.evaluate.check): the steady state is what gets checked and timed
        checked = check_launcher(fn, inputs, ref, tol, device, written=written)
    except Exception as e:
        res.reason = f"failed to run: {_one_line(e)}"
        return res
    res.max_rel_error = checked.max_rel_error
    if checked.status != "ok":
        res.status = "wrong"
        res.reason = ("non-finite output: " if checked.status == "nan" else "") + f"{checked.reason}; not timed"
        return res
    res.status, res.fn = "ok", fn
    return res


def user_clocks(fns: list[Callable[[], Any]], device: str = "cuda") -> list[dict[str, float | None]]:
    """The clocks a caller sees (evo.evaluate.clocks), each interleaved across `fns`. The graph clock comes last:
    a capture that fails must not disturb the eager clocks of the others."""
    from evo.evaluate import clocks

    call = clocks.call_ms(fns, device=device)
    host = clocks.host_us(fns, device=device)
    graph = clocks.graph_ms(fns, device=device)
    return [{"call_ms": c, "graph_ms": g, "host_us": h} for c, g, h in zip(call, graph, host, strict=True)]


def measure_contenders(operator: Any, problem: Problem, entrants: list[Entrant], *, timer: Timer,
                       device: str = "cuda", seed: int = 0, reps: int = 100, warmup: int = 5,
                       budget_ms: float = 4000.0, clocks: Clocks | None = None) -> list[ContenderResult]:
    """Set up, check and time `entrants` on one problem (and, given `clocks`, measure the correct ones on
    those clocks); results in the order of `entrants`."""
    if not entrants:
        raise ValueError("no contenders to measure")
    inputs = operator.make_inputs(problem, seed, device)
    ref = operator.reference(*inputs)
    tol = float(operator.tolerance(problem))
    written = getattr(operator, "written", None)  # what an in-place operator writes into its inputs is judged too
    results = [_setup_and_check(e, problem, inputs, ref, tol, device, written) for e in entrants]
    del ref
    ok = [r for r in results if r.status == "ok"]
    if ok:
        fns = [(lambda f=r.fn: f(*inputs)) for r in ok]
        timings = timer(fns, reps=reps, warmup=warmup, budget_ms=budget_ms)
        for r, t in zip(ok, timings, strict=True):
            r.median_ms, r.spread_ms = float(t.median_ms), float(t.spread_ms)
            r.reps = len(getattr(t, "times_ms", []) or []) or None
        if clocks is not None:
            _measure_clocks(ok, fns, clocks)
    for r in results:
        r.fn = None  # release kernels and their caches before the next problem
    return results


def _measure_clocks(ok: list[ContenderResult], fns: list[Callable[[], Any]], clocks: Clocks) -> None:
    try:
        figures = clocks(fns)
    except Exception as e:  # the GPU times stand; the clocks' absence is said where a reader looks for them
        for r in ok:
            r.reason = f"clocks not measured: {_one_line(e)}"
        return
    for r, f in zip(ok, figures, strict=True):
        r.call_ms, r.graph_ms, r.host_us = (None if f.get(k) is None else float(f[k]) for k in CLOCK_KEYS)


def search_summary(store: Store, problem_key: str) -> dict[str, Any]:
    """How much search a problem had: evaluations (all statuses), correct ones, and wall time spanned."""
    evs = store.evaluations(problem_key)
    if not evs:
        return {"evaluations": 0, "evaluations_ok": 0, "search_s": None}
    span = max(e.finished_at for e in evs) - min(e.started_at for e in evs)
    return {"evaluations": len(evs), "evaluations_ok": sum(e.status == "ok" for e in evs),
            "search_s": round(float(span), 1)}
