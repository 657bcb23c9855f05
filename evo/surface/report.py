"""The HTML report of a run: one self-contained file (plotly.js embedded, works offline).

Per problem: the archive heatmap over two descriptors (colour = throughput or ratio to the baseline, hover =
genome and numbers, click = the kernel's source), the failure map (which cells failed and why), the best
throughput and QD-score against evaluations, and the elites' table (GPU, per-call and host times; throughput,
ratio and SOL on the clock the objective names); then the run's metadata. The archive is
rebuilt from the store alone (`GridArchive.from_store`). Every text from the run is escaped: html.escape in
markup, and JSON embedded in a script element with `<`, `>` and `&` written as \\u escapes.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from evo.archive.elite import experiment_order, problem_archive
from evo.archive.reachable import MAX_PROBLEMS, experiment_reachable
from evo.experiment.spec import Budget, DescriptorSpec, Experiment
from evo.problem import Problem
from evo.search.budget import cut_short
from evo.store.record import Evaluation
from evo.store.sqlite import Store
from evo.surface.export import is_smoke, run_target
from evo.surface.report_emitters import emitter_history
from evo.surface.report_html import embed_json, page
from evo.surface.report_overview import overview_data
from evo.surface.smoke_label import SMOKE_SCORE
from genomes.base import Genome

__all__ = ["ReportError", "ReportInput", "build_report", "report_data", "embed_json"]


# A run of thousands of shapes cannot be one page of thousands of sections (the browser gives up, and rendering each
# elite's kernel again takes minutes): the first MAX_DETAILED problems get a section, every problem a row in the
# overview; at most MAX_SOURCES kernel sources are embedded (`evo export` writes any problem's).
MAX_DETAILED = 100
MAX_SOURCES = 500


class ReportError(ValueError):
    """A report that cannot be built as asked (e.g. an unknown descriptor for --x); one-line message."""


@dataclass(frozen=True)
class ReportInput:
    """What a report is built from: the store, and the run's experiment when it could be loaded."""

    store: Store
    name: str
    experiment: Experiment | None = None
    experiment_text: str = ""


def _genome(canonical: str, family: Any) -> Genome:
    """A stored genome with the genes its family gained since at the values it held (no domain check: a run may
    have restricted a gene differently)."""
    return family.unchecked(json.loads(canonical)["genes"])


@functools.lru_cache(maxsize=4096)  # a genome recurs across the problems of a run
def _genome_text(canonical: str, family: Any) -> str:
    return str(_genome(canonical, family))


def _num(x: float | None, digits: int = 4) -> float | None:
    """A finite float rounded for the page, or None (JSON has no NaN)."""
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None
    return float(f"{x:.{digits}g}")


def _axis_pair(axes: tuple, x: str | None, y: str | None) -> tuple[int, int | None]:
    names = [a.name for a in axes]
    for wanted, flag in ((x, "--x"), (y, "--y")):
        if wanted is not None and wanted not in names:
            raise ReportError(f"{flag} {wanted!r} is not a descriptor of this run's archive; "
                              f"its descriptors are {', '.join(names)}")
    ix = names.index(x) if x else 0
    if y:
        iy = names.index(y)
    else:
        rest = [i for i in range(len(names)) if i != ix]
        iy = rest[0] if rest else None
    if iy == ix:
        raise ReportError(f"--x and --y name the same descriptor {names[ix]!r}")
    return ix, iy


def _ticks(axis: Any) -> list[str]:
    """Bin labels in the units people think in (a tile 128×256, a structure's name; see genomes.labels)."""
    return [axis.descriptor.tick(e) for e in axis.edges]


def _doc(axis: Any) -> str:
    """The descriptor's doc for an axis title, unless its ticks already say it (labelled descriptors)."""
    return "" if axis.descriptor.label is not None else axis.descriptor.doc


def _problem_data(store: Store, problem: Problem, op: Any, specs: tuple[DescriptorSpec, ...], noise: float,
                  x: str | None, y: str | None, meta: dict[str, Any], sources: dict[str, str], floor_evaluations: int
                  ) -> dict[str, Any]:
    evs: list[Evaluation] = store.evaluations(problem.key)
    archive = problem_archive(store, problem, specs, noise, operator=op)  # the elite status and export name
    ix, iy = _axis_pair(archive.axes, x, y)
    ax_x = archive.axes[ix]
    ax_y = archive.axes[iy] if iy is not None else None
    nx, ny = ax_x.cells, (ax_y.cells if ax_y else 1)
    by_id = {ev.id: ev for ev in evs}
    target = run_target(meta)
    floor = meta.get(f"floor:{problem.key}")  # the speed-of-light floor the search saved (None: no real floor)

    # the best elite of each (x, y) cell, over the other descriptors when there are more than two
    cells: dict[tuple[int, int], Any] = {}
    for e in archive.elites():
        key = (e.cell[ix], e.cell[iy] if iy is not None else 0)
        if key not in cells or e.throughput > cells[key].throughput:
            cells[key] = e
    elites = []
    for (cx, cy), e in sorted(cells.items(), key=lambda kv: -kv[1].throughput):
        ev = by_id.get(e.evaluation_id)
        if e.source_hash not in sources and len(sources) < MAX_SOURCES:
            try:  # the source measured, as the store kept it; else (an older store's row) the genome rendered again
                sources[e.source_hash] = store.source(e.source_hash) or op.render(_genome(e.genome, op.family),
                                                                                  problem, target)
            except Exception as err:  # a genome the current renderer refuses: say so in the panel
                sources[e.source_hash] = f"# this genome could not be rendered again: {err}"
        elites.append({
            "x": cx, "y": cy, "cell": list(e.cell), "throughput": _num(e.throughput), "ratio": _num(e.ratio, 3),
            "median_ms": _num(e.median_ms), "genome": _genome_text(e.genome, op.family), "genome_hash": e.genome_hash,
            "source": e.source_hash, "origin": e.origin, "index": e.index, "id": e.evaluation_id,
            "descriptors": [_num(v) for v in e.descriptors],
            "baseline_ms": _num(ev.baseline_ms) if ev else None, "gpu": ev.gpu if ev else "",
            "spread_ms": _num(ev.spread_ms) if ev else None,
            "fitness_ms": _num(e.fitness_ms), "call_ms": _num(e.call_ms), "host_us": _num(e.host_us, 3),
            "sol": _num(floor["ms"] / e.fitness_ms, 3) if floor and e.fitness_ms else None,
        })

    # failures: every evaluation that is not ok, placed by its genome (and resources, when it has them)
    fail_cells: dict[tuple[int, int], Counter] = {}
    tried: Counter = Counter()
    reasons: dict[str, str] = {}
    unplaced = 0
    for ev in evs:
        try:
            cell, _ = archive.place(_genome(ev.genome, op.family), ev.resources)
        except (ValueError, KeyError, TypeError):
            if ev.status != "ok":
                unplaced += 1
            continue
        key = (cell[ix], cell[iy] if iy is not None else 0)
        tried[key] += 1
        if ev.status != "ok":
            fail_cells.setdefault(key, Counter())[ev.status] += 1
            reasons.setdefault(f"{key[0]},{key[1]},{ev.status}", ev.reason[:300])
    failures = [{"x": k[0], "y": k[1], "tried": tried[k], "counts": dict(c),
                 "reasons": {s: reasons.get(f"{k[0]},{k[1]},{s}", "") for s in c}} for k, c in fail_cells.items()]
    by_status = Counter(ev.status for ev in evs)
    sample_reason = {}
    for ev in evs:
        if ev.status != "ok" and ev.status not in sample_reason and ev.reason:
            sample_reason[ev.status] = ev.reason[:300]
    hist = archive.history
    best = archive.best
    sol = floor["ms"] / best.median_ms if floor and best is not None and best.median_ms else None  # GPU-time floor
    # the archive judges every correct row by the latest one's objective (evo.archive.elite)
    objective = next((ev.objective for ev in reversed(evs) if ev.status == "ok"), None)
    times = [t for ev in evs for t in (ev.started_at, ev.finished_at) if t]
    spent = meta.get(f"wall_s:{problem.key}")  # saved by the search; else the evaluations' span
    elapsed = float(spent) if spent is not None else (max(times) - min(times)) if times else None
    return {
        "key": problem.key, "operator": problem.operator, "shape": problem.shape_text, "dtype": problem.dtype,
        "unit": op.throughput_unit, "baseline": next((ev.baseline for ev in evs if ev.baseline), "baseline"),
        "x": {"name": ax_x.name, "doc": _doc(ax_x), "ticks": _ticks(ax_x)},
        "y": {"name": ax_y.name if ax_y else "", "doc": _doc(ax_y) if ax_y else "",
              "ticks": _ticks(ax_y) if ax_y else [""]},
        "objective": objective,
        "nx": nx, "ny": ny, "axes": [a.name for a in archive.axes], "projected": len(archive.axes) > 2,
        "elites": elites, "failures": failures, "unplaced_failures": unplaced,
        "status_counts": dict(by_status), "sample_reason": sample_reason,
        "emitters": emitter_history(evs, problem, op, specs, noise),
        "history": {"evaluations": hist.evaluations, "best": [_num(b) for b in hist.best],
                    "qd_score": [_num(q) for q in hist.qd_score]},
        "summary": {"evaluations": len(evs), "ok": by_status.get("ok", 0), "cells": archive.cells,
                    "filled": len(archive), "coverage": _num(archive.coverage, 3), "qd_score": _num(archive.qd_score),
                    "best": _num(best.throughput) if best else None,
                    "best_ratio": _num(best.ratio, 3) if best else None,
                    "elapsed_s": _num(elapsed, 3), "sol_share": _num(sol, 3),
                    "floor_ms": _num(floor["ms"]) if floor else None,
                    "cut_short": cut_short(meta.get(f"summary:{problem.key}"), len(evs), floor_evaluations)},
    }


def report_data(inp: ReportInput, x: str | None = None, y: str | None = None) -> dict[str, Any]:
    """Everything the page shows, as plain JSON-able data."""
    import operators

    store = inp.store
    meta = store.all_meta()
    exp = inp.experiment
    specs = exp.descriptors if exp else ()
    noise = exp.evaluation.noise_margin if exp else 0.01
    sources: dict[str, str] = {}
    problems = []
    keys = experiment_order(store.problem_keys(), exp)
    ops: dict[str, Any] = {}
    smoke = False
    gpus: Counter = Counter()
    versions: dict[str, Counter] = {}
    measured = []
    for key in keys:
        first = next(store.iter(key))
        problem = Problem.from_json(first.problem)
        if problem.operator not in ops:  # unrestricted genes: earlier sessions may have used other overrides
            ops[problem.operator] = operators.get(problem.operator)
        if len(problems) < MAX_DETAILED:
            problems.append(_problem_data(store, problem, ops[problem.operator], specs, noise, x, y, meta, sources,
                                          (exp.budget if exp else Budget()).floor))
            measured.append((problem, ops[problem.operator], problems[-1]))
        else:
            measured.append((problem, ops[problem.operator], _problem_brief(store, problem, ops[problem.operator],
                                                                            specs, noise)))
        for ev in store.iter(key):
            smoke = smoke or is_smoke(ev, meta)
            gpus[ev.gpu] += 1
            for k, v in ev.versions.items():
                versions.setdefault(k, Counter())[str(v)] += 1
    if smoke:
        for _, _, p in measured:
            _smoke_view(p)
    if len(keys) <= MAX_PROBLEMS:  # coverage also over the cells the genomes can reach (evo.archive.reachable)
        for p in problems:
            p["summary"]["reachable"] = _reachable(store, p["key"], exp, specs, noise, meta)
    run_meta = {
        "name": inp.name, "experiment": exp.name if exp else "", "operator": exp.operator if exp else "",
        "seed": exp.seed if exp else meta.get("seed"), "executor": exp.executor.kind if exp else "",
        "objective": exp.evaluation.objective if exp else "",
        "gpus": dict(gpus), "versions": {k: dict(c) for k, c in versions.items()},
        "descriptors": [d.name for d in specs], "selection": exp.selection if exp else "",
        "mutators": exp.mutators if exp else {}, "budget": asdict(exp.budget) if exp else {},
        "store_meta": {k: v for k, v in meta.items() if k != "experiment"},
    }
    if smoke and "target" in run_meta["store_meta"]:  # kernels ran in the CPU interpreter, not on this target
        name = run_meta["store_meta"]["target"].get("name", "?")
        run_meta["store_meta"]["target"] = f"CPU Triton interpreter (kernels checked against the limits of {name})"
    overview = overview_data(store, measured, smoke)
    overview["detailed"] = len(problems)
    return {"run": run_meta, "smoke": smoke, "problems": problems, "sources": sources, "max_sources": MAX_SOURCES,
            "experiment_text": inp.experiment_text, "overview": overview}


def _problem_brief(store: Store, problem: Problem, op: Any, specs: tuple[DescriptorSpec, ...],
                   noise: float) -> dict[str, Any]:
    """What the overview shows of a problem beyond the first MAX_DETAILED: its elites' numbers, best first."""
    evs = store.evaluations(problem.key)
    archive = problem_archive(store, problem, specs, noise, operator=op)
    by_id = {ev.id: ev for ev in evs}
    elites = []
    for e in sorted(archive.elites(), key=lambda e: -e.throughput):
        ev = by_id.get(e.evaluation_id)
        elites.append({"throughput": _num(e.throughput), "ratio": _num(e.ratio, 3), "median_ms": _num(e.median_ms),
                       "genome": _genome_text(e.genome, op.family), "gpu": ev.gpu if ev else "",
                       "fitness_ms": _num(e.fitness_ms), "call_ms": _num(e.call_ms), "host_us": _num(e.host_us, 3)})
    return {"key": problem.key, "unit": op.throughput_unit, "elites": elites,
            "objective": next((ev.objective for ev in reversed(evs) if ev.status == "ok"), None)}


def _reachable(store: Store, key: str, exp: Experiment | None, specs: tuple[DescriptorSpec, ...], noise: float,
               meta: dict[str, Any]) -> int | None:
    problem = Problem.from_json(next(store.iter(key)).problem)
    archive = problem_archive(store, problem, specs, noise)
    return experiment_reachable(archive, problem, exp, run_target(meta))


def _smoke_view(p: dict[str, Any]) -> None:
    """A smoke run's numbers as what they are: scores without a unit, no times, no ratios to a baseline."""
    p["unit"], p["baseline"] = SMOKE_SCORE, "no baseline (smoke)"
    for e in p["elites"]:
        e.update(median_ms=None, spread_ms=None, ratio=None, baseline_ms=None, fitness_ms=None, call_ms=None,
                 host_us=None)
    if "summary" in p:  # (a problem of the overview only has none)
        p["summary"]["best_ratio"] = None


def build_report(inp: ReportInput, x: str | None = None, y: str | None = None) -> str:
    """The complete HTML page."""
    data = report_data(inp, x, y)
    if not data["problems"]:
        raise ReportError("the run has no evaluations yet: nothing to report")
    return page(data)
