"""The best kernel of a problem: ONE definition, used by `evo status`, `evo report`, `evo export` and `evo bench`.

It is the best of the archive's elites (evo.archive.grid.Elite, one per cell) of the archive rebuilt from the store
(insert keeps the fastest correct kernel per cell, with the noise margin; best = highest throughput), whose correct
evaluations are those made on one GPU model and one set of software versions: those of the problem's latest correct
evaluation (on the GPU the caller names, when that GPU measured any), judged by that evaluation's objective (its
clock: per-call time or GPU time); failures count as evaluations wherever they ran.
`best_evaluation` returns its evaluation, `best_kernels` a BestKernel (problem and evaluation) per problem of a run.
`ranked` lists the archive's elites best first (one per kernel source): the finalists `evo bench` re-times
when asked. The experiment, when known, gives the descriptors and noise margin the search used.
A correct row whose genome its family refuses (a gene outside its domain: an edited or damaged store) cannot be
rendered again, so it is never an elite: it is skipped as a damaged row (the store's `skipped`, one warning line).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evo.archive.grid import GridArchive
from evo.experiment.spec import DescriptorSpec, Experiment
from evo.problem import Problem
from evo.store.record import Evaluation

__all__ = ["BestKernel", "settings", "problem_archive", "ranked", "best_evaluation", "best_kernels", "experiment_order",
           "EliteKernel"]


@dataclass(frozen=True)
class BestKernel:
    """A problem and its best correct evaluation (what `evo export` writes and `evo status` shows)."""

    problem: Problem
    evaluation: Evaluation


EliteKernel = BestKernel  # its name before issue 43 (an Elite is the archive's record of one cell)


def settings(experiment: Experiment | None) -> tuple[Sequence[DescriptorSpec], float]:
    """The descriptors and noise margin the experiment's search used (the defaults when it is unknown)."""
    return (experiment.descriptors, experiment.evaluation.noise_margin) if experiment else ((), 0.01)


def experiment_order(keys: list[str], experiment: Experiment | None) -> list[str]:
    """The stored problems `keys`, the experiment's first in its order (when it is known), then the rest."""
    if experiment is None:
        return list(keys)
    order = [p.key for p in experiment.problems]
    stored, listed = set(keys), set(order)
    return [k for k in order if k in stored] + [k for k in keys if k not in listed]


def _judged_rows(store: Any, problem: Problem, gpu: str | None, operator: Any) -> list[Evaluation]:
    """The rows the best kernel is chosen from (see the module doc), each judged by the objective of the latest correct
    one (Evaluation.judged_by): a run resumed under another objective (allowed changes) does not rank one clock
    against another."""
    rows = [r for r in store.evaluations(problem.key) if r.status != "ok" or _in_domain(store, r, operator.family)]
    ok = [r for r in rows if r.status == "ok"]
    ok = [r for r in ok if r.gpu == gpu] or ok  # the GPU asked for, when it measured anything
    if not ok:
        return rows
    last = ok[-1]  # failures count as evaluations wherever they ran; only these timings may become elites
    return [r.judged_by(last.objective) for r in rows  # (versions map names to version strings: == is the key's)
            if r.status != "ok" or (r.gpu == last.gpu and r.versions == last.versions)]


def _in_domain(store: Any, row: Evaluation, family: Any) -> bool:
    """Whether the row's genome is one of its family's (each gene within its domain); a row that is not is noted
    among the store's skipped rows."""
    why = _domain_error(family, row.genome)
    if why:
        skipped = getattr(store, "skipped", None)
        if skipped is not None:
            skipped.add(row.id, f"genome outside its family's domain ({why})")
    return not why


@functools.lru_cache(maxsize=4096)
def _domain_error(family: Any, canonical: str) -> str:
    """'' when the family takes the genome, else why not (a genome recurs across problems: checked once)."""
    try:
        family.from_canonical(canonical)
        return ""
    except (ValueError, KeyError, TypeError) as e:  # InvalidGenome is a ValueError
        return " ".join(str(e).split())[:120] or type(e).__name__


def _operator(problem: Problem, operator: Any) -> Any:
    if operator is None:  # the registry's, unrestricted (earlier sessions may have used other overrides)
        import operators

        operator = operators.get(problem.operator)
    return operator


def _archive(rows: list[Evaluation], problem: Problem, descriptors: Sequence[DescriptorSpec], noise_margin: float,
             operator: Any) -> GridArchive:
    archive = GridArchive.for_problem(operator, problem, descriptors, noise_margin)
    archive.add(rows)
    return archive


def problem_archive(store: Any, problem: Problem, descriptors: Sequence[DescriptorSpec] = (),
                    noise_margin: float = 0.01, gpu: str | None = None, operator: Any = None) -> GridArchive:
    """The archive of `problem` from the store's rows on one GPU model and versions (see the module doc).
    `operator` defaults to the registry's, unrestricted (earlier sessions may have used other overrides)."""
    operator = _operator(problem, operator)
    return _archive(_judged_rows(store, problem, gpu, operator), problem, descriptors, noise_margin, operator)


def ranked(store: Any, problem: Problem, experiment: Experiment | None = None, gpu: str | None = None,
           operator: Any = None) -> list[Evaluation]:
    """The archive's elites, best first (earliest on a tie), one per kernel source."""
    operator = _operator(problem, operator)
    rows = _judged_rows(store, problem, gpu, operator)
    archive = _archive(rows, problem, *settings(experiment), operator)
    best = archive.best
    elites = sorted(archive.elites(), key=lambda e: -e.throughput)
    if best is not None:  # the archive's best leads even when a later elite is within its noise margin
        elites.sort(key=lambda e: e.genome_hash != best.genome_hash)
    by_id = {r.id: r for r in rows if r.status == "ok"}
    out, seen = [], set()
    for e in elites:
        ev = by_id.get(e.evaluation_id)
        if ev is not None and ev.source_hash not in seen:
            seen.add(ev.source_hash)
            out.append(ev)
    return out


def best_evaluation(store: Any, problem: Problem, experiment: Experiment | None = None, gpu: str | None = None,
                    operator: Any = None) -> Evaluation | None:
    """The evaluation of the problem's best kernel (the first of `ranked`), None without a correct one."""
    found = ranked(store, problem, experiment, gpu, operator)
    return found[0] if found else None


def best_kernels(store: Any, experiment: Experiment | None = None) -> list[BestKernel]:
    """The best kernel of each problem with a correct evaluation, in the order problems were first stored."""
    out = []
    ops: dict[str, Any] = {}  # one registry look-up per operator: it reads every installed package's entry points
    for key in store.problem_keys():
        rows = store.evaluations(key, "ok")
        if not rows:
            continue
        problem = Problem.from_json(rows[0].problem)
        if problem.operator not in ops:
            ops[problem.operator] = _operator(problem, None)
        ev = best_evaluation(store, problem, experiment, operator=ops[problem.operator])
        if ev is not None:
            out.append(BestKernel(problem, ev))
    return out
