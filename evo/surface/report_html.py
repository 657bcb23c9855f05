"""The page of `evo report`: markup (escaped on the server), style, and the script that draws the plots.

Tables are written here escaped (report_overview.escape), so they read without JavaScript; the plots are
drawn in the page by plotly.js, embedded whole so the file works offline. The data reaches the script as JSON in a
`<script type="application/json">` element (see `embed_json`); the script writes text into the
page with textContent only, never as markup.
"""

from __future__ import annotations

import json
from typing import Any

from evo.surface.report_overview import ROOFLINE_SCRIPT, overview_html
from evo.surface.report_overview import escape as _e
from evo.surface.report_overview import number_text as _n

__all__ = ["page"]

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 0 24px 48px; color: #222; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 40px; border-bottom: 1px solid #ccc; padding-bottom: 4px; }
.warning { background: #fff3cd; border: 1px solid #e0b400; padding: 10px 14px; margin: 12px 0; font-weight: 600; }
.row { display: flex; gap: 16px; flex-wrap: wrap; align-items: flex-start; }
.plot { flex: 3 1 560px; min-height: 420px; min-width: 0; } .half { flex: 1 1 480px; min-height: 340px; min-width: 0; }
.panel { flex: 2 1 380px; min-width: 0; border: 1px solid #ccc; border-radius: 4px; padding: 8px 12px;
         background: #fafafa; }
.panel .mono { overflow-wrap: anywhere; }
.panel pre { max-height: 520px; overflow: auto; background: #fff; border: 1px solid #ddd; padding: 8px;
             font-size: 12px; white-space: pre; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; max-width: 100%; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; overflow-wrap: break-word; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.meta td table { margin: 0; } table.meta th { width: 1%; white-space: nowrap; }
.nofail { flex: 1 1 480px; padding: 12px; color: #2a6a2a; }
tr.elite { cursor: pointer; } tr.elite:hover { background: #eef4ff; }
.muted { color: #666; } code, .mono { font-family: ui-monospace, monospace; font-size: 12px; }
details pre { background: #f6f6f6; padding: 8px; overflow: auto; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("evo-data").textContent);
  const state = { ready: false, shown: null, clicks: 0 };
  window.evoReport = state;
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const fmt = (v, d) => (v === null || v === undefined) ? "-" : Number(v).toPrecision(d || 4);
  const grid = (p, fill) => Array.from({ length: p.ny }, () => Array.from({ length: p.nx }, () => fill));
  // no toolbar: it covered the charts' titles; plotly renders a few tags in titles, so every run text is escaped
  const CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };
  const axisTitle = (a) => esc(a.name + (a.doc ? " (" + a.doc + ")" : ""));

  function show(pi, ei) {
    const p = DATA.problems[pi], e = p.elites[ei];
    const info = document.getElementById("info-" + pi), pre = document.getElementById("source-" + pi);
    info.textContent = p.x.name + "=" + p.x.ticks[e.x] + (p.y.name ? ", " + p.y.name + "=" + p.y.ticks[e.y] : "") +
      ": " + fmt(e.throughput) + " " + p.unit + ", GPU " + fmt(e.median_ms) + " ms, " +
      (DATA.smoke ? "" : "call " + fmt(e.call_ms) + " ms, host " + fmt(e.host_us, 3) + " µs, ") +
      (e.ratio === null ? "no ratio" : fmt(e.ratio, 3) + "x " + p.baseline) + " | " + e.genome;
    pre.textContent = DATA.sources[e.source] || ("(this report embeds " + DATA.max_sources + " kernels and not " +
      "this one: `evo export RUN --shape SHAPE` writes a problem's elite)");
    state.shown = { problem: pi, elite: ei, source: e.source };
    state.clicks += 1;
  }

  function heatmap(p, pi) {
    const z = grid(p, null), zr = grid(p, null), text = grid(p, "empty cell"), cd = grid(p, null);
    p.elites.forEach((e, j) => {
      z[e.y][e.x] = e.throughput; zr[e.y][e.x] = e.ratio; cd[e.y][e.x] = j;
      text[e.y][e.x] = "<b>" + fmt(e.throughput) + " " + esc(p.unit) + "</b>, GPU " + fmt(e.median_ms) + " ms<br>" +
        (DATA.smoke ? "" : "call " + fmt(e.call_ms) + " ms, host " + fmt(e.host_us, 3) + " µs<br>") +
        "ratio to " + esc(p.baseline) + ": " + (e.ratio === null ? "-" : fmt(e.ratio, 3) + "x") + "<br>" +
        esc(e.genome).replace(/ /g, "<br>") + "<br>origin " + esc(e.origin) + ", evaluation #" + e.index;
    });
    const el = document.getElementById("heat-" + pi);
    const trace = { type: "heatmap", z: z, x: p.x.ticks.map(esc), y: p.y.ticks.map(esc), text: text, customdata: cd,
      hovertemplate: "%{text}<extra></extra>", colorscale: "Viridis", xgap: 1, ygap: 1,
      colorbar: { title: { text: esc(p.unit) } } };
    const title = "Archive: best per cell" + (p.projected ? " (best over the other descriptors)" : "");
    const layout = { title: { text: title },
      xaxis: { title: { text: axisTitle(p.x) }, type: "category", automargin: true },
      yaxis: { title: { text: axisTitle(p.y) }, type: "category", automargin: true },
      margin: { t: 40, r: 10 }, hoverlabel: { align: "left" } };
    const done = Plotly.newPlot(el, [trace], layout, CONFIG);
    el.on("plotly_click", (ev) => {
      const j = ev.points && ev.points.length ? ev.points[0].customdata : null;
      if (j !== null && j !== undefined) show(pi, j);
    });
    document.getElementById("colour-" + pi).addEventListener("change", (ev) => {
      const ratio = ev.target.value === "ratio";
      Plotly.restyle(el, { z: [ratio ? zr : z], colorscale: ratio ? "RdBu" : "Viridis", zmid: ratio ? 1 : null,
        "colorbar.title.text": esc(ratio ? "ratio to " + p.baseline : p.unit) });
    });
    return done;
  }

  function failures(p, pi) {
    if (!p.failures.length) return Promise.resolve();  // the page says so in a line instead of a blank chart
    const z = grid(p, null), text = grid(p, "no failure");
    p.failures.forEach((f) => {
      const n = Object.values(f.counts).reduce((a, b) => a + b, 0);
      z[f.y][f.x] = n / f.tried;
      text[f.y][f.x] = n + " of " + f.tried + " failed<br>" + Object.entries(f.counts).sort((a, b) => b[1] - a[1])
        .map(([s, c]) => "<b>" + esc(s) + "</b> " + c + (f.reasons[s] ? ": " + esc(f.reasons[s].slice(0, 90)) : ""))
        .join("<br>");
    });
    const trace = { type: "heatmap", z: z, x: p.x.ticks.map(esc), y: p.y.ticks.map(esc), text: text,
      colorscale: "Reds", zmin: 0, zmax: 1, xgap: 1, ygap: 1, hovertemplate: "%{text}<extra></extra>",
      colorbar: { title: { text: "failed" } } };
    const layout = { title: { text: "Failures: share of the cell's evaluations" },
      xaxis: { title: { text: esc(p.x.name) }, type: "category", automargin: true },
      yaxis: { title: { text: esc(p.y.name) }, type: "category", automargin: true },
      margin: { t: 40, r: 10 }, hoverlabel: { align: "left" } };
    return Plotly.newPlot("fail-" + pi, [trace], layout, CONFIG);
  }

  function history(p, pi) {
    const h = p.history;
    const traces = [
      { x: h.evaluations, y: h.best, name: esc("best (" + p.unit + ")"), mode: "lines", line: { shape: "hv" } },
      { x: h.evaluations, y: h.qd_score, name: "QD-score", mode: "lines", yaxis: "y2", line: { shape: "hv" } } ];
    const layout = { title: { text: "Best and QD-score against evaluations" },
      xaxis: { title: { text: "evaluations" } },
      yaxis: { title: { text: esc("best " + p.unit) }, automargin: true },
      yaxis2: { title: { text: "QD-score" }, overlaying: "y", side: "right", automargin: true },
      legend: { orientation: "h", y: -0.25 }, margin: { t: 40 } };
    return Plotly.newPlot("hist-" + pi, traces, layout, CONFIG);
  }
%ROOFLINE%

  function emitters(p, pi) {
    const em = p.emitters, names = Object.keys(em.share);
    const traces = names.map((n) => ({ x: em.evaluations, y: em.share[n], name: esc(n) + " share", mode: "lines",
      stackgroup: "share" })).concat(names.map((n) => ({ x: em.evaluations, y: em.credit[n],
      name: esc(n) + " improvements", mode: "lines", yaxis: "y2", line: { dash: "dot", shape: "hv" } })));
    const layout = { title: { text: "Emitters: share of proposals and archive improvements credited" },
      xaxis: { title: { text: "evaluations" } }, yaxis: { title: { text: "share" }, range: [0, 1] },
      yaxis2: { title: { text: "improvements (cumulative)" }, overlaying: "y", side: "right", automargin: true },
      legend: { orientation: "h", y: -0.25 }, margin: { t: 40 } };
    return Plotly.newPlot("emit-" + pi, traces, layout, CONFIG);
  }
  // Client coordinates of a heatmap cell's centre (used by the browser test to click a real cell).
  state.cellCenter = function (pi, cx, cy) {
    const gd = document.getElementById("heat-" + pi), fl = gd._fullLayout, r = gd.getBoundingClientRect();
    return { x: r.left + fl.xaxis._offset + fl.xaxis.l2p(cx), y: r.top + fl.yaxis._offset + fl.yaxis.l2p(cy) };
  };

  document.querySelectorAll("tr.elite").forEach((tr) => {
    tr.addEventListener("click", () => show(Number(tr.dataset.p), Number(tr.dataset.e)));
  });
  const plots = [roofline(DATA.overview)];
  DATA.problems.forEach((p, pi) => { plots.push(heatmap(p, pi), failures(p, pi), history(p, pi), emitters(p, pi)); });
  Promise.all(plots).then(() => { state.ready = true; document.body.setAttribute("data-ready", "1"); },
    (err) => { state.error = String(err); document.body.setAttribute("data-ready", "error"); });
})();
"""


def embed_json(value: Any) -> str:
    """JSON safe inside a <script> element: no `</script>`, `<!--` or `&` can appear in the text."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _table(head: list[str], rows: list[list[str]], row_attrs: list[str] | None = None) -> str:
    """`rows` hold already-escaped cell markup; `head` is escaped here."""
    out = ["<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for i, r in enumerate(rows):
        out.append(f"<tr{row_attrs[i] if row_attrs else ''}>" + "".join(r) + "</tr>")
    return "\n".join(out + ["</table>"])


def _num_td(v: float | None, digits: int = 4, suffix: str = "") -> str:
    return f'<td class="num">{_n(v, digits)}{_e(suffix) if v is not None else ""}</td>'


def _sol_text(s: dict[str, Any], smoke: bool) -> str:
    if smoke:
        return "Speed of light: none for a smoke run (its fitness is not a timing, so it has no floor)."
    if s.get("sol_share") is None:
        return "Speed of light: no floor known (the run measured no copy bandwidth)."
    share = f"{s['sol_share']:.0%}"
    return (f"Speed of light: the elite reaches {share} of the floor ({_n(s['floor_ms'])} ms: FLOPs at the "
            "GPU's dense peak or bytes at its copy bandwidth measured at start-up, whichever takes longer).")


_CLOCKS = {"call": "per-call time of back-to-back eager calls (what a Python loop over the kernel sees, host "
                   "launch cost included)",
           "gpu": "GPU time of one launch (CUDA events, L2 flushed; no host cost)"}


def _objective_text(p: dict[str, Any], smoke: bool) -> str:
    """Which clock the problem's throughput, ratio and SOL are on (a smoke run's are on none)."""
    if smoke or p.get("objective") not in _CLOCKS:
        return ""
    return (f' Objective {p["objective"]}: throughput, ratio and share of SOL are on the {_CLOCKS[p["objective"]]}; '
            'the table shows the GPU, call and host times of each elite.')


def _coverage(s: dict[str, Any]) -> str:
    """Filled cells over those the genomes can reach (evo.archive.reachable), and over the whole grid."""
    grid = f"{s['filled']} of {s['cells']} cells of the grid"
    if not s.get("reachable"):
        return f"{_n(s['coverage'], 3)} ({grid})"
    return f"{s['filled'] / s['reachable']:.0%} of {s['reachable']} reachable cells ({grid})"


def _problem_section(p: dict[str, Any], pi: int, smoke: bool) -> str:
    s = p["summary"]
    unit = p["unit"]
    best = f"{_n(s['best'])} {unit}" + (f", {_n(s['best_ratio'], 3)}x {p['baseline']}" if s["best_ratio"] else "")
    parts = [f'<section class="problem" id="problem-{pi}"><h2>{_e(p["key"])}</h2>',
             f'<p>{s["evaluations"]} evaluations, {s["ok"]} correct; best {_e(best)}'
             + f'; coverage {_e(_coverage(s))}; QD-score '
             f'{_n(s["qd_score"])}; elapsed {_n(s["elapsed_s"], 3)} s. Archive descriptors: '
             f'{_e(", ".join(p["axes"]))}.{_e(_objective_text(p, smoke))}'
             + (f' <b>Budget {_e(s["cut_short"])}.</b>' if s.get("cut_short") else '') + '</p>',
             f'<p><label>Colour: <select id="colour-{pi}"><option value="throughput">'
             + (f'{_e(unit)}</option>' if smoke else f'throughput ({_e(unit)})</option><option value="ratio">ratio '
                f'to {_e(p["baseline"])}</option>') + '</select></label> '
             '<span class="muted">Click a cell (or a row of the table below) to see its kernel.</span></p>',
             f'<div class="row"><div class="plot" id="heat-{pi}"></div>'
             f'<div class="panel"><h3>Kernel source</h3><div class="mono" id="info-{pi}">No cell chosen yet.</div>'
             f'<pre id="source-{pi}">Click a cell of the heatmap.</pre></div></div>',
             f'<div class="row">{_failure_place(p, pi)}<div class="half" id="hist-{pi}"></div></div>',
             f'<div class="row"><div class="half" id="emit-{pi}"></div><div class="half muted">{_sol_text(s, smoke)}'
             '</div></div>']
    counts = p["status_counts"]
    rows = [[f"<td>{_e(k)}</td>", _num_td(v, 6), f"<td>{_e(p['sample_reason'].get(k, ''))}</td>"]
            for k, v in sorted(counts.items(), key=lambda kv: -kv[1])]
    parts.append("<h3>Evaluations by status</h3>" + _table(["status", "count", "example reason"], rows))
    if p["unplaced_failures"]:
        parts.append(f'<p class="muted">{p["unplaced_failures"]} failures could not be placed on the map (a '
                     f'descriptor needs compile-time resources they lack).</p>')
    rows, attrs = [], []
    for j, e in enumerate(p["elites"]):
        timed = [] if smoke else [_num_td(e["median_ms"]), _num_td(e.get("call_ms")), _num_td(e.get("host_us"), 3),
                                  _num_td(e["ratio"], 3, "x"), _num_td(e.get("sol"), 3)]
        rows.append([_num_td(j + 1, 6), f"<td>{_e(p['x']['ticks'][e['x']])}</td>",
                     f"<td>{_e(p['y']['ticks'][e['y']])}</td>", _num_td(e["throughput"]), *timed,
                     f'<td class="mono">{_e(e["genome"])}</td>', f"<td>{_e(e['origin'])}</td>", _num_td(e["index"], 8)])
        attrs.append(f' class="elite" data-p="{pi}" data-e="{j}"')
    timed_head = [] if smoke else ["GPU ms", "call ms", "host µs", f"ratio to {p['baseline']}", "share of SOL"]
    head = ["#", p["x"]["name"], p["y"]["name"] or "-", unit, *timed_head, "genome", "origin", "evaluation #"]
    parts.append("<h3>Elites</h3>" + _table(head, rows, attrs) + "</section>")
    return "\n".join(parts)


def _failure_place(p: dict[str, Any], pi: int) -> str:
    """The failure map's place: the chart, or a line when there is nothing to draw."""
    if p["failures"]:
        return f'<div class="half" id="fail-{pi}"></div>'
    failed = sum(v for k, v in p["status_counts"].items() if k != "ok")
    text = (f"Failures: {failed} evaluations failed, none of them placeable on this map (see the table below)."
            if failed else "Failures: none. No evaluation of this problem failed.")
    return f'<p class="nofail" id="fail-{pi}">{_e(text)}</p>'


def _value(v: Any) -> str:
    """Run metadata as people read it: numbers rounded, mappings as small tables, lists joined; escaped."""
    if isinstance(v, bool) or v is None:
        return _e("yes" if v is True else "no" if v is False else "-")
    if isinstance(v, float):
        return _e(_n(v))
    if isinstance(v, dict):
        if not v:
            return "-"
        return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_value(x)}</td></tr>" for k, x in v.items()) + \
            "</table>"
    if isinstance(v, list):
        if all(not isinstance(x, (dict, list)) for x in v):
            return ", ".join(_value(x) for x in v) or "-"
        return "".join(_value(x) for x in v)
    return _e(v)


def _meta_section(data: dict[str, Any]) -> str:
    run = data["run"]
    rows = []
    for label, value in (("run", run["name"]), ("experiment", run["experiment"]), ("operator", run["operator"]),
                         ("executor", run["executor"]), ("objective", run.get("objective") or "-"),
                         ("seed", run["seed"]),
                         ("GPUs (evaluations)", ", ".join(f"{k or '?'} ({v})" for k, v in run["gpus"].items())),
                         ("versions", "; ".join(f"{k} " + ", ".join(vs) for k, vs in run["versions"].items())),
                         ("descriptors", ", ".join(run["descriptors"]) or "the search's default"),
                         ("selection", run["selection"]),
                         ("mutators", ", ".join(f"{k} {v:g}" for k, v in run["mutators"].items())),
                         ("budget", ", ".join(f"{k} {v}" for k, v in run["budget"].items() if v is not None))):
        rows.append([f"<th>{_e(label)}</th>", f"<td>{_e(value)}</td>"])
    labels = {"sessions": "sessions", "seed": "seed (stored)", "target": "target", "deciding": "settings that "
              "decide results", "resumes": "resumes", "problems": "problems", "executor": "executor (stored)"}
    for k, v in sorted(run["store_meta"].items()):
        if k.startswith("summary:"):  # each problem's section shows its summary
            continue
        label = labels.get(k) or k.replace("wall_s:", "time spent on ").replace("summary:", "summary of ").replace(
            "cpu_s:", "search process's CPU time on ").replace("queue:", "pipeline occupancy on ")
        if k.startswith(("wall_s:", "cpu_s:")) and isinstance(v, (int, float)):
            v = f"{v:.1f} s"
        rows.append([f"<th>{_e(label)}</th>", f"<td>{_value(v)}</td>"])
    out = ['<section id="metadata"><h2>Run</h2>', '<table class="meta">']
    out += ["<tr>" + "".join(r) + "</tr>" for r in rows]
    out.append("</table>")
    if data["experiment_text"]:
        out.append(f"<details><summary>Experiment file</summary><pre>{_e(data['experiment_text'])}</pre></details>")
    return "\n".join(out + ["</section>"])


def page(data: dict[str, Any]) -> str:
    """The whole report as one HTML document (plotly.js inline)."""
    import plotly.offline

    title = f"evo report: {data['run']['name']}"
    nav = " | ".join(f'<a href="#problem-{i}">{_e(p["key"])}</a>' for i, p in enumerate(data["problems"]))
    warning = ('<div class="warning">Smoke run: kernels were only checked for correctness in the CPU Triton '
               'interpreter, and every fitness in this report is a stand-in. It is NOT a timing and says nothing '
               'about speed on a GPU; smoke runs exist to try the tool.</div>' if data["smoke"] else "")
    body = "\n".join(_problem_section(p, i, data["smoke"]) for i, p in enumerate(data["problems"]))
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style>",
        f'<script>{plotly.offline.get_plotlyjs()}</script></head><body>',
        f"<h1>{_e(title)}</h1>", f'<p class="muted">Problems: {nav}</p>', warning, overview_html(data["overview"]),
        body, _meta_section(data),
        f'<script type="application/json" id="evo-data">{embed_json(data)}</script>',
        f"<script>{_SCRIPT.replace('%ROOFLINE%', ROOFLINE_SCRIPT)}</script>", "</body></html>", ""])
