"""A run's summary from its store alone: per problem, evaluations, ok/failed by status, best throughput, its
ratio to the baseline, the best's clocks (per-call and host time), archive coverage and elapsed time, and which
clock the fitness is (the objective). Used by `evo status` and at the end of `evo run`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evo.archive.elite import experiment_order, problem_archive, settings
from evo.archive.reachable import MAX_PROBLEMS, experiment_reachable
from evo.experiment.spec import Budget, Experiment
from evo.problem import Problem
from evo.search.budget import cut_short
from evo.store.sqlite import Store
from evo.surface.export import run_target
from evo.surface.smoke_label import smoke_score

__all__ = ["ProblemStatus", "run_status", "format_status", "sol_share"]

_ABBREV = {"invalid": "inv", "compile_error": "cmp", "out_of_resources": "oor", "wrong": "wrong", "nan": "nan",
           "crashed": "crash", "timeout": "tmo", "error": "err"}


@dataclass(frozen=True)
class ProblemStatus:
    key: str
    evaluations: int
    ok: int
    failed: dict[str, int]
    best: float | None  # throughput of the archive's best elite
    unit: str
    ratio: float | None
    baseline: str
    coverage: float | None
    filled: int
    cells: int
    elapsed_s: float | None
    sol_share: float | None = None  # the best's share of the speed-of-light floor (None: no floor known)
    call_ms: float | None = None  # the best's per-call time of back-to-back eager calls
    host_us: float | None = None  # the best's host time of one call
    objective: str | None = None  # the clock best, ratio and SOL are on (None: no correct evaluation)
    cut_short: str = ""  # words when the search ended before its floor in evaluations (evo.search.budget)
    reachable: int | None = None  # cells the experiment's (restricted) genomes can reach (evo.archive.reachable)


def sol_share(store: Store, problem_key: str, median_ms: float | None) -> float | None:
    """The share of the speed-of-light floor (evo.evaluate.roofline, saved by the search) a kernel reaches;
    None where the run knew no floor (a smoke run, a GPU whose copy bandwidth was not measured)."""
    floor = store.meta(f"floor:{problem_key}")
    if not floor or not floor.get("ms") or not median_ms:
        return None
    return float(floor["ms"]) / median_ms


def run_status(store: Store, experiment: Experiment | None = None) -> list[ProblemStatus]:
    """One row per problem in the store (the experiment's order first, when it is known)."""
    import operators

    keys = experiment_order(store.problem_keys(), experiment)
    specs, noise = settings(experiment)
    floor = (experiment.budget if experiment is not None else Budget()).floor
    ops: dict[str, Any] = {}
    rows = []
    for key in keys:
        evs = store.evaluations(key)
        problem = Problem.from_json(evs[0].problem)
        if problem.operator not in ops:  # unrestricted genes: earlier sessions may have used other overrides
            ops[problem.operator] = operators.get(problem.operator)
        op = ops[problem.operator]
        archive = problem_archive(store, problem, specs, noise, operator=op)
        best = archive.best
        failed: dict[str, int] = {}
        for ev in evs:
            if ev.status != "ok":
                failed[ev.status] = failed.get(ev.status, 0) + 1
        # the search saves the wall time spent on each problem; older or foreign stores: the evaluations' span
        times = [t for ev in evs for t in (ev.started_at, ev.finished_at) if t]
        spent = store.meta(f"wall_s:{key}")
        # the latest correct row's objective is the archive's (evo.archive.elite judges every row by it)
        objective = next((ev.objective for ev in reversed(evs) if ev.status == "ok"), None)
        rows.append(ProblemStatus(
            key=key, evaluations=len(evs), ok=sum(ev.status == "ok" for ev in evs), failed=failed,
            best=best.throughput if best else None, unit=op.throughput_unit, ratio=best.ratio if best else None,
            baseline=next((ev.baseline for ev in evs if ev.baseline), ""), coverage=archive.coverage,
            filled=len(archive), cells=archive.cells,
            sol_share=sol_share(store, key, best.median_ms if best else None),  # SOL: a GPU-time floor
            elapsed_s=float(spent) if spent is not None else (max(times) - min(times)) if times else None,
            call_ms=best.call_ms if best else None, host_us=best.host_us if best else None, objective=objective,
            cut_short=cut_short(store.meta(f"summary:{key}"), len(evs), floor),
            reachable=experiment_reachable(archive, problem, experiment, run_target(store.all_meta()))
            if len(keys) <= MAX_PROBLEMS else None))
    return rows


def _elapsed(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _best_head(rows: list[ProblemStatus], smoke: bool) -> str:
    """The best column's title names the objective: the clock that best, ratio and SOL are on ("call": per-call
    time of back-to-back eager calls; "gpu": GPU time of one launch)."""
    used = sorted({r.objective for r in rows if r.objective})
    return "best" if smoke or not used else f"best (objective {'/'.join(used)})"


def _coverage(r: ProblemStatus) -> str:
    """Filled cells over those the genomes can reach, with the grid's size: "75% of 8 reachable (6/45 cells)"."""
    if r.coverage is None:
        return "-"
    if not r.reachable:
        return f"{r.coverage:.0%} ({r.filled}/{r.cells} cells)"
    return f"{r.filled / r.reachable:.0%} of {r.reachable} reachable ({r.filled}/{r.cells} cells)"


def format_status(rows: list[ProblemStatus], smoke: bool = False) -> str:
    """A plain-text table; a smoke run's throughput column is labelled as not a timing, and its clocks are left
    out (nothing of it is timed). `call`: the best's per-call time; `host`: its host time of one call."""
    head = ["problem", "evals", "ok", "failed", _best_head(rows, smoke), "ratio", "call", "host", "SOL", "coverage",
            "elapsed"]
    table = [head]
    for r in rows:
        failed = " ".join(f"{_ABBREV.get(k, k)} {n}" for k, n in sorted(r.failed.items(), key=lambda kv: -kv[1]))
        best = "-" if r.best is None else smoke_score(r.best) if smoke else f"{r.best:.4g} {r.unit}"
        ratio = f"{r.ratio:.2f}x {r.baseline}".strip() if r.ratio is not None and not smoke else "-"
        coverage = _coverage(r)
        sol = "n/a (smoke)" if smoke else f"{r.sol_share:.0%}" if r.sol_share is not None else "-"
        call = f"{r.call_ms:.4g} ms" if r.call_ms is not None and not smoke else "-"
        host = f"{r.host_us:.3g} us" if r.host_us is not None and not smoke else "-"
        table.append([r.key, str(r.evaluations), str(r.ok), failed or "-", best, ratio, call, host, sol, coverage,
                      _elapsed(r.elapsed_s)])
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    numeric = {1, 2}
    lines = []
    for j, row in enumerate(table):
        cells = [c.rjust(w) if i in numeric and j else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    notes = [f"{r.key}: {r.cut_short}" for r in rows if r.cut_short]
    lines += [""] + notes if notes else []  # below the table, after an empty line
    return "\n".join(lines)
