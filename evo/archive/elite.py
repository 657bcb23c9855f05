"""The elite of a problem: ONE definition, used by `evo status`, `evo report`, `evo export` and `evo bench`.

The elite is the best of the archive rebuilt from the store (insert keeps the fastest correct kernel per
cell, with the noise margin; best = highest objective), whose correct evaluations are those made on one GPU
model and one set of software versions: those of the problem's latest correct evaluation (on the GPU the
caller names, when that GPU measured any); failures count as evaluations wherever they ran.
`ranked` lists the archive's elites best first (one per kernel source): the finalists `evo bench` re-times
when asked. The experiment, when known, gives the descriptors and noise margin the search used.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evo.archive.grid import GridArchive
from evo.experiment.spec import DescriptorSpec, Experiment
from evo.problem import Problem
from evo.store.record import Evaluation

__all__ = ["EliteKernel", "settings", "problem_archive", "ranked", "elite", "run_elites"]


@dataclass(frozen=True)
class EliteKernel:
    problem: Problem
    evaluation: Evaluation


def settings(experiment: Experiment | None) -> tuple[Sequence[DescriptorSpec], float]:
    """The descriptors and noise margin the experiment's search used (the defaults when it is unknown)."""
    return (experiment.descriptors, experiment.evaluation.noise_margin) if experiment else ((), 0.01)


def problem_archive(store: Any, problem: Problem, descriptors: Sequence[DescriptorSpec] = (),
                    noise_margin: float = 0.01, gpu: str | None = None, operator: Any = None) -> GridArchive:
    """The archive of `problem` from the store's rows on one GPU model and versions (see the module doc).
    `operator` defaults to the registry's, unrestricted (earlier sessions may have used other overrides)."""
    if operator is None:
        import operators

        operator = operators.get(problem.operator)
    rows = store.evaluations(problem.key)
    ok = [r for r in rows if r.status == "ok"]
    ok = [r for r in ok if r.gpu == gpu] or ok  # the GPU asked for, when it measured anything
    if ok:  # failures count as evaluations wherever they ran; only these timings may become elites
        chosen = (ok[-1].gpu, ok[-1].versions_key)
        rows = [r for r in rows if r.status != "ok" or (r.gpu, r.versions_key) == chosen]
    archive = GridArchive.for_problem(operator, problem, descriptors, noise_margin)
    archive.add(rows)
    return archive


def ranked(store: Any, problem: Problem, experiment: Experiment | None = None, gpu: str | None = None,
           operator: Any = None) -> list[Evaluation]:
    """The archive's elites, best first (earliest on a tie), one per kernel source."""
    archive = problem_archive(store, problem, *settings(experiment), gpu=gpu, operator=operator)
    best = archive.best
    elites = sorted(archive.elites(), key=lambda e: -e.objective)
    if best is not None:  # the archive's best leads even when a later elite is within its noise margin
        elites.sort(key=lambda e: e.genome_hash != best.genome_hash)
    by_id = {r.id: r for r in store.evaluations(problem.key, "ok")}
    out, seen = [], set()
    for e in elites:
        ev = by_id.get(e.evaluation_id)
        if ev is not None and ev.source_hash not in seen:
            seen.add(ev.source_hash)
            out.append(ev)
    return out


def elite(store: Any, problem: Problem, experiment: Experiment | None = None, gpu: str | None = None,
          operator: Any = None) -> Evaluation | None:
    found = ranked(store, problem, experiment, gpu, operator)
    return found[0] if found else None


def run_elites(store: Any, experiment: Experiment | None = None) -> list[EliteKernel]:
    """The elite of each problem with a correct evaluation, in the order problems were first stored."""
    out = []
    for key in store.problem_keys():
        rows = store.evaluations(key, "ok")
        if not rows:
            continue
        problem = Problem.from_json(rows[0].problem)
        ev = elite(store, problem, experiment)
        if ev is not None:
            out.append(EliteKernel(problem, ev))
    return out
