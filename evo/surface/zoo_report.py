"""`evo zoo MODEL --report`: one page per zoo, from its runs (and the layer benchmark's zoo.json when there is one).

What the page holds (evo.surface.zoo_report_html draws it):
- per role and token count, the elite of that kernel problem (the same elite `evo export` and `evo status` pick)
  against the baseline its search timed beside it in the same process, with its throughput, and what the zoo's
  module runs for it: evo's elite where it beat the baseline, else the baseline (evo.surface.kernel_choice);
- the layer's end-to-end time per token count, four ways and two clocks (from zoo.json: evo.bench.zoo_layer);
- a roofline of every elite (arithmetic intensity against achieved TFLOP/s) under the best FLOP/s and bytes/s
  measured by any kernel or baseline of these runs (measured ceilings: lower bounds of what the GPU can do);
- where the layer's time goes: per token count, the layer's kernels stacked (elite times times uses), beside the
  same stack of their baselines. Kernels only: what runs between them (RoPE, copies, launches) is not in it,
  which the end-to-end times show.
A smoke zoo (the CPU interpreter) timed nothing: the page says so and shows no times, ratios or roofline.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from evo.archive.elite import best_evaluation
from evo.evaluate.smoke import SMOKE_GPU
from evo.experiment.rundir import RunDir
from evo.experiment.spec import Budget
from evo.search.budget import cut_short
from evo.store.sqlite import Store
from evo.surface.kernel_choice import choose
from evo.surface.report_overview import rounded as _num
from evo.zoo.model import ModelSpec
from evo.zoo.problems import layer_problems, run_name

__all__ = ["zoo_report_data", "write_zoo_report", "report_path"]


def report_path(folder: Path) -> Path:
    return folder / "report.html"


def _kernel_rows(spec: ModelSpec, tokens: list[int], dtype: str, context: int, folder: Path, weights: str = "bf16"
                 ) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """One row per (role, token count), and the best FLOP/s and bytes/s any timing of these problems reached."""
    import operators

    stores: dict[str, Store | None] = {}
    floors: dict[str, int] = {}  # operator -> its run's floor in evaluations (evo.search.budget)
    best = {"flops": 0.0, "bytes": 0.0}
    rows = []
    try:
        for p in layer_problems(spec, tokens, dtype, context, weights=weights):
            row: dict[str, Any] = {"role": p.role, "operator": p.operator, "tokens": p.tokens, "uses": p.uses,
                                   "scope": p.scope, "shape": p.shape_text, "status": "torch (no evo operator)"}
            rows.append(row)
            if p.operator is None:
                continue
            if p.operator not in stores:
                rd = RunDir(folder / run_name(spec, p.operator))
                stores[p.operator] = Store(rd.store, readonly=True) if rd.exists() else None
                floors[p.operator] = _floor(rd)
            store = stores[p.operator]
            op = operators.get(p.operator)
            problem = op.problem(p.sizes, dtype)
            row["key"] = problem.key
            if store is None:
                row["status"] = "not searched (no run)"
                continue
            flops, nbytes = op.flops(problem), op.bytes(problem)
            row["intensity"] = _num(flops / nbytes) if nbytes else None
            for ev in store.iter(problem.key, status="ok"):
                for ms in (ev.median_ms, ev.baseline_ms):
                    if ms and ev.gpu != SMOKE_GPU:
                        best["flops"] = max(best["flops"], flops / (ms * 1e-3))
                        best["bytes"] = max(best["bytes"], nbytes / (ms * 1e-3))
            row["cut_short"] = cut_short(store.meta(f"summary:{problem.key}"), store.count(problem.key),
                                         floors[p.operator])
            ev = best_evaluation(store, problem)
            if ev is None:
                row["status"] = "no correct kernel"
                continue
            smoke = ev.gpu == SMOKE_GPU
            choice = choose(ev, smoke, "def selfcheck_baseline(" in (op.selfcheck_source(problem) or ""))
            row.update(runs=choice.use, runs_why=choice.why)  # what the zoo module runs (evo.surface.kernel_choice)
            row.update(status="smoke (not a timing)" if smoke else "measured", gpu=ev.gpu,
                       genome=" ".join(f"{k}={v}" for k, v in sorted(json.loads(ev.genome)["genes"].items())),
                       baseline=ev.baseline, smoke=smoke)
            if not smoke:
                row.update(ms=_num(ev.median_ms), call_ms=_num(ev.call_ms), baseline_ms=_num(ev.baseline_ms),
                           baseline_call_ms=_num(ev.baseline_call_ms), ratio=_num(ev.ratio, 3),
                           tflops=_num(flops / (ev.median_ms * 1e-3) / 1e12) if ev.median_ms else None,
                           gbps=_num(nbytes / (ev.median_ms * 1e-3) / 1e9) if ev.median_ms else None)
    finally:
        for store in stores.values():
            if store is not None:
                store.close()
    return rows, best


def _floor(rd: RunDir) -> int:
    """The floor in evaluations of the run's experiment (its copy in the run), else the default one."""
    from evo.experiment.config import ConfigError, load_experiment

    try:
        return load_experiment(rd.experiment).budget.floor
    except (ConfigError, OSError, ValueError):
        return Budget().floor


def _breakdown(rows: list[dict[str, Any]], tokens: list[int]) -> dict[str, Any]:
    """Per token count and layer role: the elite's GPU time times its uses, and its baseline's the same way."""
    roles = list(dict.fromkeys(r["role"] for r in rows if r["scope"] == "layer"))
    evo = {role: [None] * len(tokens) for role in roles}
    base = {role: [None] * len(tokens) for role in roles}
    for r in rows:
        if r["scope"] == "layer" and r.get("ms"):
            i = tokens.index(r["tokens"])
            evo[r["role"]][i] = _num(r["ms"] * r["uses"])
            base[r["role"]][i] = _num(r["baseline_ms"] * r["uses"]) if r.get("baseline_ms") else None
    return {"tokens": tokens, "roles": roles, "evo": evo, "baseline": base}


def zoo_report_data(spec: ModelSpec, tokens: list[int], dtype: str, context: int, folder: Path,
                    layer_doc: dict[str, Any] | None = None, weights: str = "bf16") -> dict[str, Any]:
    rows, best = _kernel_rows(spec, tokens, dtype, context, folder, weights)
    smoke = any(r.get("smoke") for r in rows)
    points = [{"key": f"{r['role']} T={r['tokens']}", "x": r["intensity"], "y": r["tflops"], "best": True,
               "genome": r.get("genome", ""), "ratio": r.get("ratio")}
              for r in rows if r.get("tflops") and r.get("intensity")]
    roofline = None
    if points and best["flops"] and best["bytes"]:
        roofline = {"points": points, "peak_tflops": _num(best["flops"] / 1e12), "peak_gbps": _num(best["bytes"] / 1e9)}
    gpus = sorted({r["gpu"] for r in rows if r.get("gpu")})
    return {"model": spec.name, "spec": dataclasses.asdict(spec), "tokens": tokens, "dtype": dtype, "weights": weights,
            "context": context, "folder": str(folder), "smoke": smoke, "gpus": gpus, "kernels": rows,
            "breakdown": None if smoke else _breakdown(rows, tokens), "overview": {"roofline": roofline},
            "layer": layer_doc}


def write_zoo_report(spec: ModelSpec, tokens: list[int], dtype: str, context: int, folder: Path,
                     layer_json: Path | None = None, weights: str = "bf16") -> Path:
    """Write `folder`/report.html; `layer_json` is the layer benchmark's zoo.json (None: `folder`/zoo.json when
    it exists). ValueError (one line) for a zoo.json that cannot be read or is of another model."""
    from evo.store.atomic_file import write_atomic
    from evo.surface.zoo_report_html import zoo_page

    layer_doc = None
    path = layer_json if layer_json is not None else folder / "zoo.json"
    if layer_json is not None or path.exists():
        try:
            layer_doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the layer results {path}: {e}") from None
        if not isinstance(layer_doc, dict) or not isinstance(layer_doc.get("layers"), list):
            raise ValueError(f"{path} is not the layer benchmark's zoo.json (no list 'layers')")
        if layer_doc.get("model") != spec.name:
            raise ValueError(f"{path} holds the layer of {layer_doc.get('model')!r}, not of {spec.name!r}")
    out = report_path(folder)
    write_atomic(out, zoo_page(zoo_report_data(spec, tokens, dtype, context, folder, layer_doc, weights)))
    return out
