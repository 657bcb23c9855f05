"""The page of `evo zoo MODEL --report`: tables escaped on the server, plots drawn by plotly.js embedded whole (the
file works offline), the data handed to the script as JSON (evo.surface.report_html.embed_json), as `evo report`
does; the roofline is `evo report`'s own (evo.surface.report_overview.ROOFLINE_SCRIPT)."""

from __future__ import annotations

from typing import Any

from evo.surface.report_html import embed_json
from evo.surface.report_overview import ROOFLINE_SCRIPT
from evo.surface.report_overview import escape as _e
from evo.surface.report_overview import number_text as _n
from evo.zoo.goals import GOALS, WAYS, speedup

__all__ = ["zoo_page"]

_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1400px; padding: 0 24px 48px; color: #222; }
h1 { margin: 24px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid #ccc; padding-bottom: 4px; }
.warning { background: #fff3cd; border: 1px solid #e0b400; padding: 10px 14px; margin: 12px 0; font-weight: 600; }
.plot { min-height: 420px; } .muted { color: #666; }
code, .mono { font-family: ui-monospace, monospace; font-size: 12px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.miss { color: #a00; } td.met { color: #2a6a2a; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("evo-data").textContent);
  const state = { ready: false };
  window.evoZooReport = state;
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const fmt = (v, d) => (v === null || v === undefined) ? "-" : Number(v).toPrecision(d || 4);
  const CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };
%ROOFLINE%

  function layer() {
    const el = document.getElementById("layer-plot");
    if (!el || !DATA.layer) return Promise.resolve();
    const ts = DATA.layer.layers.map((l) => "T=" + l.tokens), traces = [];
    ["", "_graph"].forEach((clock) => {
      ["eager", "compile", "zoo_eager", "zoo_compile"].forEach((w) => {
        traces.push({ type: "bar", name: esc(w + (clock ? " (CUDA graph)" : " (per call)")), x: ts,
          y: DATA.layer.layers.map((l) => l[w + clock + "_ms"]), xaxis: clock ? "x2" : "x",
          yaxis: clock ? "y2" : "y" });
      });
    });
    const layout = { title: { text: "The layer, end to end (ms per call; lower is better)" }, barmode: "group",
      grid: { rows: 1, columns: 2, pattern: "independent" },
      yaxis: { title: { text: "ms, back-to-back eager calls" }, type: "log" },
      yaxis2: { title: { text: "ms, CUDA-graph replay" }, type: "log" },
      legend: { orientation: "h", y: -0.2 }, margin: { t: 40 } };
    return Plotly.newPlot(el, traces, layout, CONFIG);
  }

  function breakdown() {
    const el = document.getElementById("breakdown-plot"), b = DATA.breakdown;
    if (!el || !b) return Promise.resolve();
    const traces = [];
    b.roles.forEach((role, i) => {
      const colour = "hsl(" + Math.round(360 * i / b.roles.length) + ",55%,55%)";
      traces.push({ type: "bar", name: esc(role), legendgroup: esc(role), x: b.tokens.map((t) => "T=" + t),
        y: b.evo[role], offsetgroup: "evo", marker: { color: colour }, hovertemplate: esc(role) +
        " (evo): %{y} ms<extra></extra>" });
      traces.push({ type: "bar", name: esc(role) + " (baseline)", legendgroup: esc(role), showlegend: false,
        x: b.tokens.map((t) => "T=" + t), y: b.baseline[role], offsetgroup: "baseline",
        marker: { color: colour, pattern: { shape: "/" } },
        hovertemplate: esc(role) + " (baseline): %{y} ms<extra></extra>" });
    });
    const layout = {
      title: { text: "Where the layer's kernel time goes: evo's elites (plain), their baselines (hatched)" },
      barmode: "stack", yaxis: { title: { text: "GPU ms per layer (time x uses)" } },
      legend: { orientation: "h", y: -0.2 }, margin: { t: 40 } };
    return Plotly.newPlot(el, traces, layout, CONFIG);
  }

  Promise.all([roofline(DATA.overview), layer(), breakdown()]).then(
    () => { state.ready = true; document.body.setAttribute("data-ready", "1"); },
    (err) => { state.error = String(err); document.body.setAttribute("data-ready", "error"); });
})();
"""


def _kernels_section(data: dict[str, Any]) -> str:
    head = ["role", "T", "operator", "shape", "runs", "status", "GPU ms", "call ms", "baseline", "baseline ms",
            "ratio", "TFLOP/s", "GB/s", "kernel", "module runs", "budget"]
    out = ['<section id="kernels"><h2>Kernels per role and token count</h2>',
           '<p class="muted">Each kernel problem\'s elite (as <code>evo export</code> picks it) against the baseline '
           'its search timed beside it, in the same process on the same inputs: above 1× the elite is faster. '
           'GPU ms: CUDA events around one launch, L2 flushed; call ms: back-to-back eager calls.</p>',
           "<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for r in data["kernels"]:
        cells = [r["role"], r["tokens"], r["operator"] or "-", r["shape"], f"{r['uses']}x per {r['scope']}",
                 r["status"]]
        nums = [_n(r.get("ms")), _n(r.get("call_ms")), None, _n(r.get("baseline_ms")), _n(r.get("ratio"), 3, "×"),
                _n(r.get("tflops")), _n(r.get("gbps"))]
        row = "".join(f"<td>{_e(c)}</td>" for c in cells)
        row += "".join(f"<td>{_e(r.get('baseline') or '-')}</td>" if v is None else f'<td class="num">{_e(v)}</td>'
                       for v in nums)
        runs = f'{r["runs"]}: {r["runs_why"]}' if r.get("runs") else "-"
        row += (f'<td class="mono">{_e(r.get("genome", ""))}</td><td>{_e(runs)}</td>'
                f'<td>{_e(r.get("cut_short") or "-")}</td>')
        out.append(f"<tr>{row}</tr>")
    return "\n".join(out + ["</table></section>"])


def _layer_section(data: dict[str, Any]) -> str:
    doc = data["layer"]
    out = ['<section id="layer"><h2>The layer, end to end</h2>']
    if doc is None:
        out.append('<p class="muted" id="layer-none">No layer results: run <code>python -m evo.bench.zoo_layer '
                   'ZOO_MODULE MODEL --out DIR</code> on a GPU and pass its zoo.json (<code>--layer-results</code>; '
                   'DIR/&lt;model&gt;/zoo.json is found by itself).</p></section>')
        return "\n".join(out)
    out.append(f'<p class="muted">{_e(doc.get("gpu"))}, {_e(doc.get("dtype"))}, KV cache of '
               f'{_e(doc.get("context", 0))} tokens; roles patched in: {_e(", ".join(doc.get("roles", {})))}. '
               "eager: the plain layer; compile: torch.compile max-autotune-no-cudagraphs; zoo_*: the layer with "
               "the zoo's kernels patched in. Goals (issue 29): " + _e("; ".join(
                   f"{label} ≥ {goal:.2f}×" for label, _, _, goal in GOALS)) + ".</p>")
    head = ["T"] + [f"{w} ms" for w in WAYS] + [f"{w} graph ms" for w in WAYS]
    head += [label for label, _, _, _ in GOALS] + ["max error (tolerance)"]
    out.append("<table><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>")
    for layer in doc["layers"]:
        cells = [f'<td class="num">{_e(layer["tokens"])}</td>']
        cells += [f'<td class="num">{_e(_n(layer.get(f"{w}_ms")))}</td>' for w in WAYS]
        cells += [f'<td class="num">{_e(_n(layer.get(f"{w}_graph_ms")))}</td>' for w in WAYS]
        for _, rival, zoo, goal in GOALS:
            s = speedup(layer, rival, zoo)
            cls = "num" if s is None else ("num met" if s >= goal else "num miss")
            cells.append(f'<td class="{cls}">{_e(_n(s, 3, "×"))}</td>')
        wrong = "" if layer.get("within_tolerance", True) else " WRONG"
        cells.append(f'<td class="num">{_e(_n(layer.get("max_rel_error"), 3))} '
                     f'({_e(_n(layer.get("tolerance"), 3))}){_e(wrong)}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append('</table><div class="plot" id="layer-plot"></div>')
    failures = [(layer["tokens"], way, why) for layer in doc["layers"]
                for way, why in layer.get("failures", {}).items()]
    if failures:
        out.append("<details><summary>Ways that did not run</summary><ul>" + "".join(
            f"<li>T={_e(t)} {_e(w)}: {_e(why)}</li>" for t, w, why in failures) + "</ul></details>")
    return "\n".join(out + ["</section>"])


def _plots_section(data: dict[str, Any]) -> str:
    if data["smoke"]:
        return ('<section id="roofline-section"><h2>Roofline and time breakdown</h2><p class="muted" '
                'id="roofline-none">None: a smoke zoo timed nothing (its scores are stand-ins computed on the '
                'CPU).</p></section>')
    rf = data["overview"]["roofline"]
    out = ['<section id="roofline-section"><h2>Roofline</h2>']
    if rf is None:
        out.append('<p class="muted" id="roofline-none">No roofline: no kernel of this zoo was timed yet.</p>')
    else:
        out.append(f'<p class="muted">Every role\'s elite at its problem\'s arithmetic intensity. The ceilings are the '
                   f'best any kernel or baseline of these runs reached ({_e(_n(rf["peak_tflops"]))} TFLOP/s, '
                   f'{_e(_n(rf["peak_gbps"]))} GB/s): the GPU can do at least that much.</p>'
                   '<div class="plot" id="roofline"></div>')
    out.append('<h2>Where the layer\'s time goes</h2><p class="muted">Per token count, the layer\'s kernels stacked '
               '(GPU time times uses per layer: the two norms count twice), evo\'s elites beside their baselines. '
               'Kernels only: RoPE, the cache copy and the launches between kernels are not in it (the end-to-end '
               'times above hold them).</p><div class="plot" id="breakdown-plot"></div>')
    return "\n".join(out + ["</section>"])


def zoo_page(data: dict[str, Any]) -> str:
    import plotly.offline

    title = f"evo zoo: {data['model']}"
    spec = data["spec"]
    warning = ('<div class="warning">Smoke zoo: its kernels were only checked for correctness in the CPU Triton '
               'interpreter; nothing in it is a timing, and it says nothing about speed on a GPU.</div>'
               if data["smoke"] else "")
    facts = (f"hidden {spec['hidden_size']}, intermediate {spec['intermediate_size']} ({spec['mlp']}), heads "
             f"{spec['num_attention_heads']}/{spec['num_key_value_heads']} kv × {spec['head_dim']}, vocab "
             f"{spec['vocab_size']}; {'FP8 weights (e4m3, per-channel scales), ' * (data.get('weights') == 'fp8')}"
             f"{data['dtype']}; token counts {', '.join(map(str, data['tokens']))}; KV cache of "
             f"{data['context']} tokens; GPU {', '.join(data['gpus']) or '-'}; runs under {data['folder']}")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title><style>{_CSS}</style>",
        f"<script>{plotly.offline.get_plotlyjs()}</script></head><body>",
        f"<h1>{_e(title)}</h1>", f'<p class="muted">{_e(facts)}</p>', warning,
        _layer_section(data), _kernels_section(data), _plots_section(data),
        f'<script type="application/json" id="evo-data">{embed_json(data)}</script>',
        f"<script>{_SCRIPT.replace('%ROOFLINE%', ROOFLINE_SCRIPT)}</script>", "</body></html>", ""])
