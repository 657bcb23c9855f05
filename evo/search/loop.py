"""The search: asynchronous steady-state MAP-Elites over the problems of an experiment, one archive each.

Steady state, no generations: the search keeps `executor.slots` jobs in flight; each finished evaluation
is stored, offered to the archive, and immediately replaced by a new child varied from the archive as it
is now. While GPUs check and time, the CPU side renders and compiles the next jobs, so a GPU that frees up
gets a compiled job at once.

Problems are searched in order, each by a ProblemSearch (evo.search.problem_search: fill the free slots, take a
result, drain); the next one's search starts ahead, its first population taking the free slots while the one
before drains its last candidates, so that the GPUs do not wait for its first compiles. The first population of a
problem takes in turn the elites of the nearest problems earlier runs measured on this GPU model and versions (the
shared results database, evo.store.shared), the family's seeds and the elites of the problems already searched
(with `transfer`, nearest shapes first), the elites repaired for this problem, then `initial_random` random valid
genomes (evo.search.variation). After it, the experiment's emitters propose the children, a bandit scheduler
choosing which one proposes next from the archive improvements each caused (evo.search.emitters; its counts
restart with each session). A problem's search stops at the first budget reached: evaluations, wall time,
stagnation (evaluations since the best last rose beyond the noise margin), or `sol` (the elite's share of the
problem's speed-of-light floor, evo.evaluate.roofline, when the workers measured one).

The store is the checkpoint. Every evaluation is committed as it arrives, and everything else is rebuilt
from it on resume: the archive (by replaying the rows in order, exactly as it was built live), the
evaluation count, the stagnation counter, the genomes already tried. A resumed problem continues with a
random stream derived from (seed, problem, evaluations so far), so resuming is deterministic too. Beside each
problem's clock (`wall_s:<problem>`) the store keeps the search process's CPU seconds (`cpu_s:`) and how full
the executor's pipeline was in the latest session (`queue:`, evo.evaluate.occupancy).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict

import numpy as np

from evo.archive import Elite, GridArchive
from evo.evaluate import Candidate, Executor
from evo.evaluate.roofline import Floor, floor
from evo.experiment.spec import Experiment
from evo.mutators import MutatorMix
from evo.problem import Problem, shape_distance
from evo.search import emitters as emitting
from evo.search.events import ProblemSummary, RunSummary, SearchEvent
from evo.search.problem_search import ProblemSearch
from evo.search.selection import get as get_selection
from evo.search.variation import Proposal, Variation
from evo.store.record import Evaluation
from evo.store.shared import SharedResults
from evo.store.sqlite import Store

__all__ = ["Search", "EventCallback"]

EventCallback = Callable[[SearchEvent], None]


class Search:
    """One session of an experiment's search over its problems, on a started executor."""

    def __init__(self, experiment: Experiment, operator: object, store: Store, executor: Executor,
                 on_event: EventCallback | None = None, run_id: str | None = None,
                 shared: SharedResults | None = None, notices: Sequence[str] = ()) -> None:
        run_id = run_id or f"{experiment.name}#1"
        if not run_id.startswith(f"{experiment.name}#"):
            raise ValueError(f"run id {run_id!r} must be '<experiment name>#<session>'")
        self.experiment = experiment
        self.operator = operator
        self.family = operator.family  # type: ignore[attr-defined]
        self.unit = getattr(operator, "throughput_unit", "")
        self.store = store
        self.executor = executor
        self.on_event = on_event
        self.run_id = run_id
        self.mutators = MutatorMix(experiment.mutators)
        self.selection = get_selection(experiment.selection)
        self.margin = experiment.evaluation.noise_margin
        self.shared = shared  # the results database shared across runs (evo.store.shared), or None
        self._notices = list(notices)  # one-line messages for the user, shown once the search has begun
        self.emitters = [emitting.get(e.name, dict(e.settings)) for e in experiment.emitters]
        self._ticket = 0
        self._session_evaluations = 0
        self._busy = -1
        self._next: ProblemSearch | None = None  # the next problem's search, when it was started ahead
        self.archives: dict[str, GridArchive] = {}  # by problem key, as searched in this session

    def run(self) -> RunSummary:
        t0 = time.monotonic()
        archives = self.archives
        summaries: list[ProblemSummary] = []
        interrupted = False
        for i, problem in enumerate(self.experiment.problems):
            transfer = self._transfer_elites(archives, problem) if self.experiment.transfer else []
            archive, summary = self.search_problem(i, problem, transfer)
            archives[problem.key] = archive
            summaries.append(summary)
            if summary.reason == "interrupted":
                interrupted = True
                break
        return RunSummary(self.experiment.name, str(self.store.path.parent), tuple(summaries), interrupted,
                          self._session_evaluations, time.monotonic() - t0)

    # -- one problem ----------------------------------------------------------------------------------
    def search_problem(self, index: int, problem: Problem, transfer: Sequence[Elite] = ()
                       ) -> tuple[GridArchive, ProblemSummary]:
        """Search problem `index` (evo.search.problem_search): the search started ahead for it, if the problem
        before it handed over, else a new one."""
        ahead, self._next = (self._next, None) if self._next is not None and self._next.index == index else (None, None)
        return (ahead or ProblemSearch(self, index, problem)).run(transfer)

    def first_population(self, index: int, problem: Problem, transfer: Sequence[Elite], seen: set[str]
                          ) -> tuple[Variation, deque[Proposal]]:
        """The problem's variation and its first population (none of it submitted yet)."""
        exp = self.experiment
        variation = Variation(self.family, problem, self.executor.target, self.mutators, self.selection)
        first = variation.initial(self._rng(index, 0), exp.initial_random, transfer, seen, self._remembered(problem),
                                  exp.seeds)
        return variation, deque(first)

    def hand_over(self, current: ProblemSearch) -> None:
        """Problem `current` submits nothing more: the next problem's search, started ahead, takes the free slots
        with its first population (evo.search.problem_search), unless it finished in an earlier session."""
        problems, index = self.experiment.problems, current.index
        if self._next is None:
            if index + 1 >= len(problems) or self.executor.in_flight >= self.executor.slots:
                return
            problem = problems[index + 1]
            if self.store.meta(f"summary:{problem.key}") is not None:
                return
            searched = {**self.archives, problems[index].key: current.archive}
            self._next = ProblemSearch.ahead(self, index + 1, problem, searched)
        self._next.fill_slots()

    def new_ticket(self) -> int:
        self._ticket += 1
        return self._ticket

    def store_row(self, job: Candidate, ev: Evaluation) -> None:
        """Stamp `ev` with its job's provenance and this run, and store it (and share it)."""
        if ev.problem_key != job.problem.key or ev.genome_hash != job.genome.hash:
            raise RuntimeError(f"executor returned an evaluation of {ev.problem_key} {ev.genome_hash} for job "
                               f"{job.ticket} ({job.problem.key} {job.genome.hash})")
        ev.origin, ev.parents, ev.run_id, ev.emitter = job.origin, list(job.parents), self.run_id, job.emitter
        # judged by the experiment's objective: the worker's rows are already; failures made outside one are now
        ev.objective = ev.judged_by(self.experiment.evaluation.objective).objective
        # the kernel's text is kept once per distinct kernel: what export and bench serve is what was measured
        source = job.source if job.source and job.source_hash == ev.source_hash else None
        self.store.add(ev, source)
        if self.shared is not None:
            self.shared.record(ev, source)

    def problem_rows(self, problem: Problem) -> list[Evaluation]:
        """This experiment's stored evaluations of `problem`, in store order. A run directory's store holds
        one experiment only; a store shared by several (a benchmark comparing searches) is told apart by the
        run ids, which are "<experiment name>#<session>"."""
        prefix = f"{self.experiment.name}#"
        objective = self.experiment.evaluation.objective  # earlier sessions' rows judged as this one judges
        return [r.judged_by(objective) for r in self.store.iter(problem.key) if r.run_id.startswith(prefix)]

    # -- speed of light and memory ----------------------------------------------------------------------
    def problem_floor(self, problem: Problem) -> Floor | None:
        """The problem's floor on the first worker's GPU (None without a measured copy bandwidth: smoke runs),
        kept in the store's metadata for status and the report."""
        info = self.executor.infos[0] if self.executor.infos else None
        found = floor(self.operator, problem, info.gpu, info.copy_GBps) if info is not None else None
        self.store.set_meta(f"floor:{problem.key}", asdict(found) if found else None)
        return found

    def _remembered(self, problem: Problem) -> list[Evaluation]:
        """Elites of the nearest problems earlier runs measured on this GPU model and versions."""
        info = self.executor.infos[0] if self.executor.infos else None
        if self.shared is None or info is None or not self.experiment.memory.seed:
            return []
        return self.shared.nearest_elites(problem, info.gpu, info.versions, self.experiment.memory.seed)

    def _rng(self, problem_index: int, stream: int, evaluations: int = 0) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence([self.experiment.seed, problem_index, stream,
                                                             evaluations]))

    def _transfer_elites(self, archives: dict[str, GridArchive], problem: Problem) -> list[Elite]:
        """Elites of the problems searched so far for `problem`: those of the nearest shapes first
        (evo.problem.shape_distance: a decode GEMM's tiles suit another decode GEMM, not a prefill one), then the
        best ratio to the baseline (ratios compare across shapes where throughputs do not)."""
        sizes = {p.key: p.sizes for p in self.experiment.problems}
        ranked = [(round(shape_distance(sizes[key], problem.sizes), 6), e)  # (rounded: equal distances tie)
                  for key, a in archives.items() for e in a.elites()]
        ranked.sort(key=lambda de: (de[0], -(de[1].ratio or 0.0), -de[1].throughput, de[1].genome_hash))
        return [e for _, e in ranked]
