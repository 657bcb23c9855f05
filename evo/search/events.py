"""What a search tells the outside world: progress events while it runs, and a summary when it ends.

`SearchEvent.kind` is one of:
  "problem_start"  a problem's search begins (or resumes);
  "evaluation"     one evaluation completed and was stored (`evaluation`, `added`);
  "workers"        the number of busy GPU workers changed;
  "problem_done"   a problem's search ended (`reason`: evaluations, wall_s, stagnation, sol, interrupted);
  "message"        a line of text for the user (`message`).
Every event carries the state of its problem: evaluations so far, the best throughput and its ratio to the
primary baseline, failures by status, and the GPU workers busy and in total.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evo.archive import AddStatus
from evo.store.record import Evaluation

__all__ = ["SearchEvent", "ProblemSummary", "RunSummary", "EVENT_KINDS", "STOP_REASONS"]

EVENT_KINDS = ("problem_start", "evaluation", "workers", "problem_done", "message")
STOP_REASONS = ("evaluations", "wall_s", "stagnation", "sol", "interrupted")


@dataclass(frozen=True)
class SearchEvent:
    kind: str
    problem_key: str
    problem_index: int  # 0-based position in the experiment's problems
    problems: int  # number of problems in the experiment
    evaluations: int  # completed evaluations of this problem, earlier sessions included
    budget: int | None  # evaluation budget of a problem
    best: float | None  # throughput of the best elite (in `unit`)
    best_ratio: float | None  # that elite's speed relative to the primary baseline (> 1 is faster)
    unit: str
    failures: dict[str, int]  # evaluations by status, other than "ok"
    busy_workers: int
    total_workers: int
    coverage: float
    qd_score: float
    elapsed_s: float  # in this problem's search, earlier sessions included
    evaluation: Evaluation | None = None  # kind "evaluation": the one just stored
    added: AddStatus | None = None  # kind "evaluation": what the archive did with it
    reason: str = ""  # kind "problem_done": why the search of the problem stopped
    message: str = ""  # kind "message"
    sol_share: float | None = None  # the best elite's share of the speed-of-light floor (None: no floor known)


@dataclass(frozen=True)
class ProblemSummary:
    """The outcome for one problem.

    Transfer is judged by `best_index` (the number of evaluations after which the archive's best first came
    within the noise margin of its final value) against `best_index_without_transfer` (the first evaluation
    that came within the margin of that final value while having no transferred ancestor; None when none did).
    `transfer_saved` is their difference: the evaluations that transfer saved in this run. When no candidate
    free of transfer reached the final best at all, it is the lower bound `evaluations + 1 - best_index` and
    `transfer_saved_is_bound` is True. None without transfer. It is a within-run measure: a search without
    transfer (an experiment with `transfer: false`) is the counterfactual to compare with when it matters.
    """

    problem_key: str
    evaluations: int
    reason: str  # why the search of this problem stopped ("" if it did not run)
    unit: str
    best: float | None
    best_ratio: float | None
    best_genome: str | None  # canonical form
    best_index: int | None
    best_index_without_transfer: int | None
    transferred: int  # genomes seeded from other problems' elites
    transfer_saved: int | None
    transfer_saved_is_bound: bool
    coverage: float
    qd_score: float
    filled: int
    cells: int
    failures: dict[str, int] = field(default_factory=dict)
    sol_share: float | None = None  # the best elite's share of the speed-of-light floor (None: no floor known)
    emitters: dict[str, dict[str, int]] = field(default_factory=dict)  # this session: proposed, improvements
    exhausted: bool = False  # its emitters could only propose genomes already tried (the floor then holds nothing)

    @classmethod
    def of(cls, problem_key: str, archive: Any, reason: str, unit: str, margin: float, rows: list[Evaluation],
           sol_share: float | None, emitters: dict[str, dict[str, int]], exhausted: bool = False) -> ProblemSummary:
        """The summary of a problem's archive (evo.archive.GridArchive) and its stored `rows`, in store order."""
        best = archive.best
        best_index = without = saved = None
        transferred, bound = 0, False
        if best is not None:
            best_index = archive.history.first_reaching(best.throughput, margin)
            threshold = best.throughput * (1.0 - margin)
            without, transferred = _first_without_transfer(rows, archive.throughput_of, threshold)
            if transferred and best_index is not None:
                bound = without is None
                saved = (archive.evaluations + 1 if bound else without) - best_index
        return cls(
            problem_key=problem_key, evaluations=archive.evaluations, reason=reason, unit=unit,
            best=best.throughput if best else None, best_ratio=best.ratio if best else None,
            best_genome=best.genome if best else None, best_index=best_index,
            best_index_without_transfer=without, transferred=transferred, transfer_saved=saved,
            transfer_saved_is_bound=bound, coverage=archive.coverage, qd_score=archive.qd_score, filled=len(archive),
            cells=archive.cells, failures={k: n for k, n in sorted(archive.status_counts.items()) if k != "ok"},
            sol_share=sol_share, emitters=emitters, exhausted=exhausted)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RunSummary:
    name: str
    run_dir: str
    problems: tuple[ProblemSummary, ...]
    interrupted: bool  # stopped by Ctrl-C (completed evaluations are in the store)
    session_evaluations: int  # evaluations completed in this session
    elapsed_s: float  # of this session
    smoke: bool = False  # fitness of a smoke run is not a GPU timing


def _first_without_transfer(rows: list[Evaluation], throughput: Callable[[Evaluation], float | None],
                            threshold: float) -> tuple[int | None, int]:
    """(1-based index of the first row reaching `threshold` with no transferred ancestor, rows of origin
    transfer). Ancestry follows the stored parents, in store order."""
    descended: set[str] = set()
    first = None
    transferred = 0
    for n, ev in enumerate(rows, start=1):
        if ev.origin == "transfer":
            transferred += 1
        if ev.origin == "transfer" or any(p in descended for p in ev.parents):
            descended.add(ev.genome_hash)
            continue
        value = throughput(ev)
        if first is None and value is not None and value >= threshold:
            first = n
    return first, transferred
