"""The report's overview across problems: each problem's elite against every baseline the run measured, and a
roofline of every elite (arithmetic intensity against achieved FLOP/s) under the ceilings measured in the run.

The ceilings are measured, not quoted from a datasheet: the highest FLOP/s and the highest bytes/s that any
kernel or baseline reached in this run, each computed from the operator's own FLOP and byte counts. They are
lower bounds of what the GPU can do, and say so on the page. A smoke run measured no time, so its overview has
no ratios and no roofline, and says why.
"""

from __future__ import annotations

import html
import math
from statistics import median
from typing import Any

__all__ = ["overview_data", "overview_html", "ROOFLINE_SCRIPT"]


def rounded(x: float | None, digits: int = 4) -> float | None:
    """`x` to `digits` significant digits for a page's data, None where it is missing or not finite."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.{digits}g}")


def overview_data(store: Any, problems: list[tuple[Any, Any, dict[str, Any]]], smoke: bool) -> dict[str, Any]:
    """`problems`: (Problem, Operator, the report's data of that problem) in page order."""
    rows, points, baselines = [], [], []
    best_flops = best_bytes = 0.0
    for problem, op, p in problems:
        elite = p["elites"][0] if p["elites"] else None
        flops, nbytes = op.flops(problem), op.bytes(problem)
        by_baseline: dict[str, list[float]] = {}
        for ev in store.iter(problem.key, status="ok"):
            for ms in (ev.median_ms, ev.baseline_ms):  # the roofline is the GPU's: GPU times only
                if ms and not smoke:
                    best_flops = max(best_flops, flops / (ms * 1e-3))
                    best_bytes = max(best_bytes, nbytes / (ms * 1e-3))
            # ratios on the clock the problem's elite was judged by (its objective), as the archive's are
            base_ms = ev.judged_by(p["objective"]).baseline_fitness_ms if p.get("objective") else ev.baseline_ms
            if ev.baseline and base_ms and (elite is None or ev.gpu == elite["gpu"]):
                by_baseline.setdefault(ev.baseline, []).append(base_ms)
        ratios = {}
        if elite is not None and elite["fitness_ms"] and not smoke:
            ratios = {name: rounded(median(times) / elite["fitness_ms"], 3) for name, times in by_baseline.items()}
        baselines += [name for name in ratios if name not in baselines]
        rows.append({"key": p["key"], "unit": p["unit"], "best": elite["throughput"] if elite else None,
                     "median_ms": elite["median_ms"] if elite else None, "gpu": elite["gpu"] if elite else "",
                     "call_ms": elite["call_ms"] if elite else None, "host_us": elite["host_us"] if elite else None,
                     "objective": p.get("objective"), "ratios": ratios, "elites": len(p["elites"])})
        if smoke or not flops or not nbytes:
            continue
        for j, e in enumerate(p["elites"]):
            if e["median_ms"]:
                points.append({"key": p["key"], "x": rounded(flops / nbytes),
                               "y": rounded(flops / (e["median_ms"] * 1e-3) / 1e12),
                               "best": j == 0, "genome": e["genome"], "ratio": e["ratio"]})
    geomean = {}
    for name in baselines:
        values = [r["ratios"][name] for r in rows if r["ratios"].get(name)]
        if values:
            geomean[name] = rounded(math.exp(sum(math.log(v) for v in values) / len(values)), 3)
    roofline = None
    if points and best_flops and best_bytes:
        roofline = {"points": points, "peak_tflops": rounded(best_flops / 1e12), "peak_gbps": rounded(best_bytes / 1e9)}
    return {"rows": rows, "baselines": baselines, "geomean": geomean, "roofline": roofline, "smoke": smoke}


def escape(x: Any) -> str:
    """Text for HTML (None as nothing)."""
    return html.escape("" if x is None else str(x), quote=True)


def number_text(v: float | None, digits: int = 4, suffix: str = "") -> str:
    """A number for a page's tables: `digits` significant digits and `suffix`, or "-" where it is missing."""
    return "-" if v is None else f"{v:.{digits}g}{suffix}"


def overview_html(ov: dict[str, Any]) -> str:
    """The overview section: a table (escaped here, readable without JavaScript) and the roofline's place."""
    head = ["problem", "best kernel", "GPU time", "call time", "host time"]
    head += [f"ratio to {b}" for b in ov["baselines"]] + ["GPU"]
    out = ['<section id="overview"><h2>Overview</h2>', "<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head)
           + "</tr>"]
    detailed = ov.get("detailed", len(ov["rows"]))  # the problems with a section of their own (the first ones)
    for i, r in enumerate(ov["rows"]):
        name = f'<a href="#problem-{i}">{escape(r["key"])}</a>' if i < detailed else escape(r["key"])
        cells = [f"<td>{name}</td>",
                 f'<td class="num">{escape(number_text(r["best"]))} '
                 f'{escape(r["unit"]) if r["best"] is not None else ""}</td>',
                 f'<td class="num">{escape(number_text(r["median_ms"], 4, " ms"))}</td>',
                 f'<td class="num">{escape(number_text(r["call_ms"], 4, " ms"))}</td>',
                 f'<td class="num">{escape(number_text(r["host_us"], 3, " µs"))}</td>']
        cells += [f'<td class="num">{escape(number_text(r["ratios"].get(b), 3, "×"))}</td>' for b in ov["baselines"]]
        cells.append(f"<td>{escape(r['gpu'] or '-')}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    if len(ov["rows"]) > 1 and ov["geomean"]:
        cells = ['<th colspan="5">geometric mean</th>']
        cells += [f'<td class="num">{escape(number_text(ov["geomean"].get(b), 3, "×"))}</td>' for b in ov["baselines"]]
        out.append("<tr>" + "".join(cells) + "<td></td></tr>")
    out.append("</table>")
    if detailed < len(ov["rows"]):
        out.append(f'<p class="muted" id="detailed-only">This run measured {len(ov["rows"])} problems: the sections '
                   f'below show the first {detailed} (in the experiment\'s order), this table every one. '
                   '<code>evo status RUN</code> summarises them all; <code>evo export RUN --shape SHAPE</code> writes '
                   'any problem\'s kernel.</p>')
    objectives = sorted({r["objective"] for r in ov["rows"] if r.get("objective")})
    clock = {"call": "per-call time (back-to-back eager calls, host launch cost included)",
             "gpu": "GPU time (one launch, L2 flushed)"}
    on = " and ".join(f"{clock[o]} (objective {o})" for o in objectives) or "the fitness clock"
    note = (f'A ratio is the baseline\'s time over the elite\'s on the {on}, both measured in the same process on '
            'the same inputs: above 1× the elite is faster. GPU time: CUDA events around one launch; call time: '
            'back-to-back eager calls; host time: the CPU time of one call.')
    if ov["smoke"]:
        out.append('<p class="muted" id="roofline-none">No ratios and no roofline: a smoke run times nothing (its '
                   'scores are stand-ins computed on the CPU).</p>')
    elif ov["roofline"] is None:
        out.append(f'<p class="muted">{escape(note)}</p><p class="muted" id="roofline-none">No roofline: no correct '
                   'kernel was timed yet.</p>')
    else:
        rf = ov["roofline"]
        out.append(f'<p class="muted">{escape(note)} Roofline: every elite of every problem at the problem\'s '
                   'arithmetic intensity; the ceilings are the best measured in this run '
                   f'({escape(number_text(rf["peak_tflops"]))} TFLOP/s, {escape(number_text(rf["peak_gbps"]))} GB/s, '
                   'by any kernel or baseline), so the GPU can do at least that much.</p><div class="plot" '
                   'id="roofline"></div>')
    return "\n".join(out + ["</section>"])


# Drawn by the report's script (evo.surface.report_html) with its helpers `esc` and `fmt` in scope.
ROOFLINE_SCRIPT = r"""
  // log axes labelled at 1, 2 and 5 of each decade, written out (plotly's own labels read "10 2 3" for 10 20 30)
  function ticks(lo, hi) {
    const vals = [];
    for (let k = Math.floor(Math.log10(lo)); k <= Math.ceil(Math.log10(hi)); k++) {
      [1, 2, 5].forEach((m) => { const v = m * Math.pow(10, k); if (v >= lo && v <= hi) vals.push(v); });
    }
    return { tickvals: vals, ticktext: vals.map((v) => String(Number(v.toPrecision(3)))),
      range: [Math.log10(lo), Math.log10(hi)] };
  }

  function roofline(ov) {
    const el = document.getElementById("roofline");
    if (!el || !ov.roofline) return Promise.resolve();
    const rf = ov.roofline, xs = rf.points.map((q) => q.x);
    const lo = Math.min(...xs) / 4, hi = Math.max(...xs) * 4, line = { x: [], y: [] };
    for (let i = 0; i <= 60; i++) {
      const x = lo * Math.pow(hi / lo, i / 60);
      line.x.push(x); line.y.push(Math.min(rf.peak_tflops, rf.peak_gbps * x / 1000));
    }
    const traces = [{ x: line.x, y: line.y, mode: "lines", name: "measured ceilings", hoverinfo: "skip",
      line: { color: "#888", dash: "dash" } }];
    const keys = [...new Set(rf.points.map((q) => q.key))];
    keys.forEach((k) => {
      const pts = rf.points.filter((q) => q.key === k);
      traces.push({ x: pts.map((q) => q.x), y: pts.map((q) => q.y), mode: "markers", name: esc(k),
        marker: { size: pts.map((q) => (q.best ? 13 : 7)), symbol: pts.map((q) => (q.best ? "star" : "circle")) },
        text: pts.map((q) => "<b>" + esc(k) + "</b>" + (q.best ? " (elite)" : "") + "<br>" + fmt(q.y) +
          " TFLOP/s at " + fmt(q.x) + " FLOP/byte" + (q.ratio === null ? "" : "<br>" + fmt(q.ratio, 3) +
          "x the baseline") + "<br>" + esc(q.genome).replace(/ /g, "<br>")),
        hovertemplate: "%{text}<extra></extra>" });
    });
    const ys = rf.points.map((q) => q.y).concat([rf.peak_tflops]), ylo = Math.min(...ys) / 1.5;
    const layout = { title: { text: "Roofline: every elite (star: each problem's best)" },
      xaxis: { type: "log", title: { text: "arithmetic intensity (FLOP per byte moved)" }, ...ticks(lo, hi) },
      yaxis: { type: "log", title: { text: "achieved TFLOP/s" }, ...ticks(ylo, Math.max(...ys) * 1.5) },
      legend: { orientation: "h", y: -0.2 }, margin: { t: 40 }, hoverlabel: { align: "left" } };
    return Plotly.newPlot(el, traces, layout, CONFIG);
  }
"""
