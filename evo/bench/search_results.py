"""Writing `evo bench-search`'s results: `search-<gpu slug>.json`, a markdown summary, and an offline HTML page
with the convergence plots (best kernel against wall seconds, every method on one chart per shape; the
alternatives as one point each at their tuning time): plotly's when it is installed, else a plain SVG chart
(the GPU machine has no plotly; `write_search_report` on the JSON redraws the page later)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evo.bench.results import gpu_slug
from evo.store.atomic_file import write_atomic

__all__ = ["write_search_report", "search_markdown", "search_html", "search_svg", "goals", "reach"]


def reach(points: list[list[float]], target: float) -> tuple[float | None, int | None]:
    """(seconds, evaluations) at which a trace first reaches `target`; (None, None) if it never does."""
    for seconds, evaluations, value in points:
        if value >= target:
            return seconds, int(evaluations)
    return None, None


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def goals(p: dict[str, Any]) -> dict[str, Any]:
    """The issue's goals on one problem: the surrogate's saving in evaluations to the mark, the re-run's time
    to its first run's best as a share of the first run's, evo's time to Helion-full's speed against Helion's."""
    m = p["methods"]
    out: dict[str, Any] = {}
    evo, blind, classic = m.get("evo", {}), m.get("evo-no-surrogate", {}), m.get("evo-classic", {})
    if evo.get("evaluations_to_mark") and blind.get("evaluations_to_mark"):
        out["surrogate_saving"] = blind["evaluations_to_mark"] / evo["evaluations_to_mark"]
    if evo.get("evaluations_to_mark") and classic.get("evaluations_to_mark"):
        out["saving_vs_classic"] = classic["evaluations_to_mark"] / evo["evaluations_to_mark"]
    rerun = m.get("evo-rerun")
    if rerun and evo.get("best") and evo.get("wall_s"):
        seconds, _ = reach(rerun["trace"], evo["best"] * 0.99)
        out["rerun_time_share"] = seconds / evo["wall_s"] if seconds is not None else None
    helion = next((v for k, v in p.get("alternatives", {}).items() if k.startswith("helion")), None)
    evo_alt = p.get("alternatives", {}).get("evo")
    if helion and helion.get("throughput") and helion.get("setup_s") and evo_alt and evo_alt.get("throughput"):
        # the search's own timings decide when evo got there; the side-by-side timing decides the target
        scale = evo.get("best") / evo_alt["throughput"] if evo.get("best") else 1.0
        seconds, _ = reach(evo.get("trace", []), helion["throughput"] * scale)
        out["evo_time_to_helion_share"] = seconds / helion["setup_s"] if seconds is not None else None
    return out


def _caches_line(doc: dict[str, Any]) -> str:
    if doc.get("compile_caches") == "per method":
        return ("Each method ran on an executor of its own with a Triton compile cache of its own, started and "
                "warmed up (untimed) before its clock started: every method paid its own cold compiles. evo-rerun "
                "runs after evo: it needs evo's database.")
    return ("The methods shared one started executor and its compile cache, one after the other: a kernel another "
            "method compiled before was found in the cache, so wall seconds favour later methods; evaluations to "
            "the mark are free of this.")


def _alternatives_caches_line(doc: dict[str, Any]) -> list[str]:
    if not doc.get("alternatives_caches"):
        return []
    return [f"The alternatives of each problem had compile and tuning caches of their own "
            f"({doc['alternatives_caches']}): their setup time is a cold tuning."]


def search_markdown(doc: dict[str, Any]) -> str:
    lines = [f"# Search benchmark: {doc['operator']} on {doc['gpu']}", ""]
    if doc["smoke"]:
        lines += [f"**NOT GPU TIMINGS ({doc['note']}): these files only show that the benchmark runs.**", ""]
    if doc.get("partial"):
        lines += ["**PARTIAL: written before every problem's side-by-side timing was done (the run went on, or "
                  "was stopped, after this).**", ""]
    lines += [f"{doc['note']}. Budget per problem and method: {doc['budget']}. Mark: {doc['mark']:.0%} of the "
              f"best any method found. Created {doc['created']}; versions {doc['versions']}.", "",
              f"Convergence plots: `{Path(doc.get('html', 'search.html')).name}` (open it in a browser).", "",
              *(_helion_line(doc["helion"], doc["smoke"]) if "helion" in doc else []),
              _caches_line(doc), *_alternatives_caches_line(doc), ""]
    for p in doc["problems"]:
        unit = doc["unit"] + (" (NOT a timing)" if doc["smoke"] else "")
        lines += [f"## {p['key']}", "", f"best any method found: {_f(p['best'], 4)} {unit}", "",
                  "| method | evaluations | wall s | best | evaluations to mark | seconds to mark | served |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, m in p["methods"].items():
            lines.append(f"| {name} | {m['evaluations']} | {_f(m['wall_s'])} | {_f(m['best'], 4)} | "
                         f"{m['evaluations_to_mark'] or 'not reached'} | {_f(m['seconds_to_mark'])} | {m['served']} |")
        if p["alternatives"]:
            lines += ["", "| side by side | status | median ms | throughput | setup (tuning) s |",
                      "| --- | --- | ---: | ---: | ---: |"]
            for name, a in p["alternatives"].items():
                lines.append(f"| {name} | {a.get('status')} {a.get('reason', '')[:80]} | {_f(a.get('median_ms'), 4)} "
                             f"| {_f(a.get('throughput'), 4)} | {_f(a.get('setup_s'))} |")
        else:
            lines += ["", f"Alternatives: {p['alternatives_note']}."]
        lines += _helion_progress_lines(p.get("helion_progress"), doc["unit"])
        lines += _goal_lines(goals(p))
        lines.append("")
    return "\n".join(lines) + "\n"


_GOAL_TEXT = {  # goals() key -> the sentence a reader needs: what was measured, and what the issue asks
    "surrogate_saving": "evaluations to the mark without the surrogate over with it: {x:.3g}x (goal: >= 2x)",
    "saving_vs_classic": "evaluations to the mark of classic MAP-Elites over evo's: {x:.3g}x",
    "rerun_time_share": "a re-run on evo's database reached its first run's best in {x:.1%} of the first run's time",
    "evo_time_to_helion_share": "evo's search reached Helion-full's side-by-side speed in {x:.1%} of Helion's tuning "
                                "time (goal: <= 50%)",
}
_GOAL_MISSED = {"rerun_time_share": "the re-run did not reach its first run's best",
                "evo_time_to_helion_share": "evo's search did not reach Helion-full's side-by-side speed"}


def _goal_lines(g: dict[str, Any]) -> list[str]:
    """The issue's goals on one problem, one sentence each (goals() holds the numbers, the JSON keeps them)."""
    if not g:
        return []
    text = [_GOAL_MISSED[k] if v is None else _GOAL_TEXT[k].format(x=v) for k, v in g.items()]
    return ["", "Goals: " + "; ".join(text) + "."]


def _helion_progress_lines(progress: dict[str, Any] | None, unit: str) -> list[str]:
    """How far Helion's tuning got, from its own log (evo.bench.helion_progress): what a run stopped mid-tuning
    still knows of it."""
    if not progress:
        return []
    best = (f"its best so far {_f(progress['best_ms'], 4)} ms = {_f(progress.get('best_throughput'), 4)} {unit} by "
            f"Helion's own timer (not the side-by-side clock), first reached at {_f(progress['best_at_s'])} s"
            if progress.get("best_ms") else "no configuration ran correctly yet")
    return ["", f"Helion's tuning log: {progress['configs']} configurations finished ({progress['failed']} failed "
                f"or timed out) in {progress['generations']} generations over {_f(progress['elapsed_s'])} s; {best}."]


def _helion_line(helion: dict[str, Any], smoke: bool = False) -> list[str]:
    if not helion.get("effort"):
        return ["Helion was not run (--helion none).", ""]
    if smoke:
        return [f"Helion (asked for at effort {helion['effort']!r}) was not run: the alternatives need a GPU.", ""]
    if helion.get("budget_s") is None:
        return [f"Helion ran at effort {helion['effort']!r} to the end of its search.", ""]
    return [f"Helion ran at effort {helion['effort']!r} CUT OFF after {helion['budget_s']} s of tuning: what is "
            "timed is its best kernel at the cut-off, and its setup time is the time it was given.", ""]


def search_html(doc: dict[str, Any]) -> str:
    import html

    try:
        parts = _plotly_charts(doc)
    except ImportError:  # no plotly here (the GPU machine): a chart without it
        parts = [search_svg(p, doc["unit"] + (" (NOT a timing)" if doc["smoke"] else "")) for p in doc["problems"]]
    banner = f"<p><b>NOT GPU TIMINGS: {html.escape(doc['note'])}.</b></p>" if doc["smoke"] else ""
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(doc['operator'])} search "
            f"benchmark</title></head><body><h1>Search benchmark: {html.escape(doc['operator'])} on "
            f"{html.escape(doc['gpu'])}</h1>{banner}" + "\n".join(parts) + "</body></html>\n")


def _plotly_charts(doc: dict[str, Any]) -> list[str]:
    import plotly.graph_objects as go
    from plotly.io import to_html

    parts = []
    for i, p in enumerate(doc["problems"]):
        fig = go.Figure()
        for name, m in p["methods"].items():
            xs = [t[0] for t in m["trace"]] + ([m["wall_s"]] if m["trace"] else [])
            ys = [t[2] for t in m["trace"]] + ([m["trace"][-1][2]] if m["trace"] else [])
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name, line={"shape": "hv"}))
        for name, a in p["alternatives"].items():
            if a.get("throughput") and a.get("setup_s") is not None and name not in p["methods"]:
                fig.add_trace(go.Scatter(x=[a["setup_s"]], y=[a["throughput"]], mode="markers",
                                         marker={"size": 12, "symbol": "star"}, name=f"{name} (tuning time)"))
        unit = doc["unit"] + (" (NOT a timing)" if doc["smoke"] else "")
        fig.update_layout(title=f"{p['key']}: best kernel against wall seconds", xaxis_title="wall seconds",
                          yaxis_title=f"best {unit}", height=420)
        parts.append(to_html(fig, include_plotlyjs="inline" if i == 0 else False, full_html=False))
    return parts


_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def search_svg(p: dict[str, Any], unit: str, width: int = 720, height: int = 360) -> str:
    """One problem's chart as inline SVG (no plotly): each method's best against wall seconds as a step line,
    each alternative a star at its tuning time; axes from 0 to the largest value, labelled at their ends."""
    import html

    series = {name: [(t[0], t[2]) for t in m["trace"]] + ([(m["wall_s"], m["trace"][-1][2])] if m["trace"] else [])
              for name, m in p["methods"].items()}
    stars = {name: (a["setup_s"], a["throughput"]) for name, a in p["alternatives"].items()
             if a.get("throughput") and a.get("setup_s") is not None and name not in p["methods"]}
    xs = [x for pts in series.values() for x, _ in pts] + [x for x, _ in stars.values()]
    ys = [y for pts in series.values() for _, y in pts] + [y for _, y in stars.values()]
    x_max, y_max = max(xs, default=0.0) or 1.0, max(ys, default=0.0) or 1.0
    left, top, right, bottom = 70, 30, width - 170, height - 40

    def at(x: float, y: float) -> tuple[float, float]:
        return left + (right - left) * x / x_max, bottom - (bottom - top) * y / y_max

    def points(pts: list[tuple[float, float]]) -> str:
        return " ".join(f"{px:.1f},{py:.1f}" for px, py in (at(x, y) for x, y in pts))

    out = [f"<h2>{html.escape(p['key'])}: best kernel against wall seconds</h2>",
           f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-size='11'>",
           f"<polyline points='{left},{top} {left},{bottom} {right},{bottom}' fill='none' stroke='black'/>",
           f"<text x='{left - 4}' y='{top + 4}' text-anchor='end'>{y_max:.4g}</text>",
           f"<text x='{left - 4}' y='{bottom}' text-anchor='end'>0</text>",
           f"<text x='{right}' y='{bottom + 14}' text-anchor='end'>{x_max:.4g} s</text>",
           f"<text x='{(left + right) // 2}' y='{height - 8}' text-anchor='middle'>wall seconds</text>",
           f"<text x='12' y='{(top + bottom) // 2}' transform='rotate(-90 12 {(top + bottom) // 2})' "
           f"text-anchor='middle'>best {html.escape(unit)}</text>"]
    legend = []
    for name, pts in series.items():
        colour = _COLOURS[len(legend) % len(_COLOURS)]
        steps = pts[:1] + [q for (_, y0), (x1, y1) in zip(pts, pts[1:], strict=False) for q in ((x1, y0), (x1, y1))]
        out.append(f"<polyline points='{points(steps)}' fill='none' stroke='{colour}' stroke-width='2'/>")
        legend.append((name, colour))
    for name, (x, y) in stars.items():
        colour, (px, py) = _COLOURS[len(legend) % len(_COLOURS)], at(x, y)
        out.append(f"<text x='{px:.1f}' y='{py:.1f}' fill='{colour}' text-anchor='middle' "
                   f"dominant-baseline='middle' font-size='16'>&#9733;</text>")
        legend.append((f"{name} (tuning time)", colour))
    out += [f"<text x='{right + 10}' y='{top + 14 * k + 4}' fill='{colour}'>{html.escape(name)}</text>"
            for k, (name, colour) in enumerate(legend)]
    return "\n".join(out) + "</svg>"


_SAME_IN_A_MERGE = ("kind", "operator", "gpu", "smoke", "experiment", "methods", "mark", "budget", "versions",
                    "helion")


def merge_search_docs(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new`'s problems added to `old`'s (a problem in both: `new`'s), so that a benchmark can be run a few
    problems at a time (a GPU lent for minutes at once). Raises ValueError naming what differs when the two
    are not runs of one benchmark: GPU, experiment, methods, budget or software versions."""
    differ = [k for k in _SAME_IN_A_MERGE if old.get(k) != new.get(k)]
    if differ:
        raise ValueError(f"cannot merge into the report there: its {', '.join(differ)} differ from this run's")
    keys = {p["key"] for p in new["problems"]}
    runs = old.get("runs") or [old.get("created")]
    return dict(new, problems=[p for p in old["problems"] if p["key"] not in keys] + list(new["problems"]),
                runs=[*runs, new.get("created")])


def search_report_path(gpu: str, out_dir: str | Path) -> Path:
    """Where `write_search_report` writes the JSON for `gpu`."""
    return Path(out_dir) / f"search-{gpu_slug(gpu)}.json"


def write_search_report(doc: dict[str, Any], out_dir: str | Path) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = search_report_path(doc["gpu"], out).with_suffix("")
    doc["html"] = str(stem.with_suffix(".html"))
    paths = [stem.with_suffix(".json"), stem.with_suffix(".md"), stem.with_suffix(".html")]
    write_atomic(paths[0], json.dumps(doc, indent=1) + "\n")
    write_atomic(paths[1], search_markdown(doc))
    write_atomic(paths[2], search_html(doc))
    return paths
