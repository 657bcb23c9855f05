"""One evaluation pipeline: render -> look up in the store -> compile (CPU) -> check and time (worker).

Each stage takes the `Candidate` and either fills it in or ends it with its row (which the search stores at
once). The stages are written once, here; an executor only decides where each runs, and `evo bench`,
`benchmarks.measure_eval` and the GPU tests drive the same ones. Arguments typed `Any` are duck-typed on
purpose: the backend and worker interfaces (evo.evaluate.backend) are one floor up.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evo.evaluate.candidate import Candidate, CompileResult
from evo.evaluate.faults import classify
from evo.evaluate.modules import source_hash
from evo.problem import Problem, Target
from evo.store.record import Evaluation
from genomes.base import Genome, InvalidGenome

__all__ = ["Lookup", "render", "make_candidate", "look_up", "compiled", "compile_here", "measure"]

# (source_hash, problem_key, gpu, versions) -> an earlier measured Evaluation, or None; Store.lookup fits.
Lookup = Callable[[str, str, str, dict], "Evaluation | None"]


def render(cand: Candidate, target: Target, strict: bool = False) -> Evaluation | None:
    """Stage 1, in the search's process (cheap): the candidate's kernel source for `target`, after its
    validity rules. Returns the row when it cannot be rendered; `strict` raises instead (InvalidGenome, a
    ValueError, for an invalid genome)."""
    op = cand.operator
    if cand.problem.operator != op.name:  # a bug of the caller, not a fault of the kernel
        mismatch = f"problem {cand.problem.key} is for operator {cand.problem.operator!r}, not {op.name!r}"
        if strict:
            raise ValueError(mismatch)
        return cand.row("error", mismatch)
    try:
        reasons = op.family.violations(cand.genome, cand.problem, target)
        if reasons:
            raise InvalidGenome(f"{cand.genome} cannot run {cand.problem.key} on {target.name}: {'; '.join(reasons)}")
        source = op.render(cand.genome, cand.problem, target)
    except InvalidGenome as e:
        if strict:
            raise
        return cand.row("invalid", str(e))
    except Exception as e:  # a render bug is a fault of this candidate, not of the search
        if strict:
            raise
        fault = classify(e, phase="compile")
        return cand.row(fault.status, f"render failed: {fault.reason}")
    cand.source, cand.source_hash = source, source_hash(source)
    return None


def make_candidate(operator: Any, genome: Genome, problem: Problem, target: Target, *, origin: str = "",
                   parents: tuple[str, ...] | list[str] = (), ticket: int = 0) -> Candidate:
    """A rendered candidate; raises InvalidGenome when the genome cannot run the problem."""
    cand = Candidate(problem, genome, operator, origin, tuple(parents), ticket)
    render(cand, target, strict=True)
    return cand


def look_up(cand: Candidate, lookup: Lookup | None, info: Any, objective: str | None = None) -> Evaluation | None:
    """Stage 2: an earlier measurement of the same source, problem, GPU and versions, as this candidate's row
    (a kernel's source is measured once). One search assumes one kind of GPU: the first worker's. The row is
    judged by `objective`, the serving experiment's (None: the cached row's)."""
    if lookup is None or info is None:
        return None
    cached = lookup(cand.source_hash, cand.problem.key, info.gpu, info.versions)
    return cand.served(cached, objective) if cached is not None else None


def compiled(cand: Candidate, result: CompileResult | None) -> Evaluation | None:
    """Stage 3's outcome, wherever it ran: keep what compiling found; the row when it failed (a candidate
    rejected at compile time never reaches a worker)."""
    cand.compiled = result
    if result is None or result.ok:
        return None
    return cand.row(result.status, result.reason, worker=result.worker)


def compile_here(backend: Any, cand: Candidate, target: Target) -> Evaluation | None:
    """Stage 3 in this process."""
    try:
        result = backend.compile(cand, target)
    except Exception as e:  # a backend should classify its faults; one it missed must not stop the search
        return cand.row("error", f"compile raised {type(e).__name__}: {e}")
    return compiled(cand, result)


def measure(worker: Any, cand: Candidate, timeout_s: float) -> Evaluation:
    """Stage 4: check, then time, on the worker (which turns every fault of the kernel into a row)."""
    try:
        return worker.evaluate(cand, timeout_s)
    except Exception as e:
        info = worker.info
        return cand.row("error", f"worker raised {type(e).__name__}: {e}", gpu=info.gpu, worker=info.name)
