"""Benchmark results as files: the JSON document `evo bench` writes, merging partial runs, and markdown.

One document holds one operator on one GPU model:

    {"schema": 1, "operator": "gemm", "gpu": "NVIDIA H100 80GB HBM3", "versions": {...}, "primary": "cublas",
     "throughput_unit": "TFLOP/s", "copy_GBps": 3010.0, "contenders": ["cublas", ..., "evo"],
     "problems": [{"key": "gemm:4096x4096x4096:bf16", "M": 4096, "N": 4096, "K": 4096, "dtype": "bf16",
                   "dims": ["M", "N", "K"], "flops": ..., "bytes": ..., "intensity": ..., "memory_bound": false,
                   "copy_GBps": ..., "contenders": {"cublas": {"status": "ok", "median_ms": ..., "spread_ms": ...,
                   "tflops": ..., "ratio": 1.0, "copy_fraction": ...}, ...},
                   "evo_genome": {...}, "evaluations": 412, "search_s": 180.0}, ...]}

Dimension names come from the problem (M/N/K, rows/cols); the throughput key from the operator's unit
("tflops" for TFLOP/s, "GBps" for GB/s). A contender's status is "ok" (checked, then timed), "wrong" (its output
failed the check, so it was not timed), "skipped" (it could not run here; the reason says why) or "missing"
(evo found no correct kernel). Ratios are the primary contender's median time over the contender's.

On a GPU every timed contender also has the clocks a user sees (evo.evaluate.clocks): `call_ms` (back-to-back
eager calls), `graph_ms` (CUDA-graph replay; null when the contender cannot be captured) and `host_us` (host
time of one call), with `call_ratio` and `graph_ratio` to the primary on those clocks (results_clocks.py draws
their table).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evo.bench.cells import EVO_NAME, geomean, gpu_slug
from evo.bench.cells import fmt as _fmt
from evo.bench.cells import problem_label as _problem_label
from evo.bench.results_clocks import clocks_table, not_capturable
from evo.problem import operator_file_stem
from evo.store.atomic_file import write_atomic

__all__ = ["SCHEMA", "EVO_NAME", "gpu_slug", "unit_key", "geomean", "report_paths", "write_report", "load_report",
           "merge_reports", "to_markdown", "summary_table", "print_summary"]

SCHEMA = 1
_UNIT_KEYS = {"TFLOP/s": "tflops", "GB/s": "GBps"}


def unit_key(unit: str) -> str:
    if unit not in _UNIT_KEYS:
        raise ValueError(f"unknown throughput unit {unit!r}; expected one of {sorted(_UNIT_KEYS)}")
    return _UNIT_KEYS[unit]


def report_paths(doc: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    stem = f"{operator_file_stem(doc['operator'])}-{gpu_slug(doc['gpu'])}"
    out = Path(out_dir)
    return out / f"{stem}.json", out / f"{stem}.md"


def write_report(doc: dict[str, Any], out_dir: str | Path, markdown: bool = True) -> tuple[Path, Path | None]:
    """Write `<operator>-<gpu slug>.json` (and `.md`) under `out_dir`; returns the paths written."""
    _check(doc, "<document>")
    json_path, md_path = report_paths(doc, out_dir)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, json.dumps(doc, indent=1, sort_keys=False) + "\n")
    if not markdown:
        return json_path, None
    write_atomic(md_path, to_markdown(doc))
    return json_path, md_path


def load_report(path: str | Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such benchmark file") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not a JSON benchmark document ({e})") from None
    _check(doc, str(path))
    return doc


def _check(doc: Any, where: str) -> None:
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: a benchmark document is a JSON object")
    missing = [k for k in ("schema", "operator", "gpu", "versions", "primary", "throughput_unit", "problems")
               if k not in doc]
    if missing:
        raise ValueError(f"{where}: not a benchmark document, missing {', '.join(missing)}")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"{where}: benchmark schema {doc['schema']!r}, this evo reads schema {SCHEMA}")


def merge_reports(docs: list[dict[str, Any]], names: list[str] | None = None) -> dict[str, Any]:
    """One document from partial runs of the same operator on the same GPU model.

    Problems keep the order in which they first appear; a problem measured in several documents keeps the
    measurement of the later document (and says so in `merged_from`). Runs on different GPU models, or of
    different operators, are never merged: their timings are not comparable."""
    if not docs:
        raise ValueError("nothing to merge")
    names = names or [f"document {i + 1}" for i in range(len(docs))]
    for doc, name in zip(docs, names, strict=True):
        _check(doc, name)
    first = docs[0]
    for doc, name in zip(docs[1:], names[1:], strict=True):
        for key in ("operator", "gpu", "primary", "throughput_unit"):
            if doc[key] != first[key]:
                raise ValueError(f"cannot merge {name} ({key} {doc[key]!r}) with {names[0]} ({key} {first[key]!r})")
    problems: dict[str, dict[str, Any]] = {}
    origin: dict[str, str] = {}
    for doc, name in zip(docs, names, strict=True):
        for p in doc["problems"]:
            problems[p["key"]] = p  # a dict keeps the first position and takes the later measurement
            origin[p["key"]] = name
    contenders: list[str] = []
    for doc in docs:
        for c in doc.get("contenders", []):
            if c not in contenders:
                contenders.append(c)
    versions = [d["versions"] for d in docs]
    merged = dict(first)
    merged.update({
        "problems": list(problems.values()),
        "contenders": contenders,
        "copy_GBps": max((d.get("copy_GBps") or 0.0 for d in docs), default=0.0) or None,
        "failures": [f for d in docs for f in d.get("failures", []) if f.get("key") not in problems],
        "merged_from": [{"name": n, "created": d.get("created"), "versions": d["versions"],
                         "problems": [p["key"] for p in d["problems"] if origin.get(p["key"]) == n]}
                        for d, n in zip(docs, names, strict=True)],
    })
    if any(v != versions[0] for v in versions[1:]):
        merged["versions_differ"] = True
    return merged


# -- markdown -------------------------------------------------------------------------------------------
def _cell(p: dict[str, Any], name: str, ukey: str, primary: str) -> str:
    c = p["contenders"].get(name)
    if c is None:
        return "-"
    if c["status"] != "ok":
        return c["status"]
    text = _fmt(c.get(ukey))
    if name != primary and c.get("ratio") is not None:
        text += f" ({c['ratio']:.2f}×)"
    return text


def _ratios(doc: dict[str, Any], name: str) -> list[float]:
    return [p["contenders"][name]["ratio"] for p in doc["problems"]
            if p["contenders"].get(name, {}).get("status") == "ok" and p["contenders"][name].get("ratio")]


RIVAL = "torch_compile"  # with the primary, what a user would pick instead of evo (one line each)


def _best_rival(p: dict[str, Any], primary: str, ukey: str) -> tuple[str, float] | None:
    """(name, throughput) of the faster of the primary and torch.compile on one problem, when both were timed."""
    timed = [(n, p["contenders"][n].get(ukey)) for n in (primary, RIVAL)
             if p["contenders"].get(n, {}).get("status") == "ok"]
    timed = [(n, x) for n, x in timed if x]
    return max(timed, key=lambda t: t[1]) if len(timed) == 2 else None


def _evo_vs_best(p: dict[str, Any], primary: str, ukey: str) -> float | None:
    best, evo = _best_rival(p, primary, ukey), p["contenders"].get(EVO_NAME, {})
    if best is None or evo.get("status") != "ok" or not evo.get(ukey):
        return None
    return evo[ukey] / best[1]


def summary_table(doc: dict[str, Any]) -> str:
    """The main table: throughput per problem and contender, ratio to the primary, geometric means; with
    torch.compile and evo both present, the better of the primary and torch.compile and evo's ratio to it."""
    primary, ukey, unit = doc["primary"], unit_key(doc["throughput_unit"]), doc["throughput_unit"]
    names = list(doc.get("contenders") or [])
    versus = RIVAL in names and EVO_NAME in names and primary != RIVAL
    head = ["problem"] + [f"{n} ({unit})" if n == primary else n for n in names]
    if versus:
        head += [f"best of {primary} and {RIVAL}", f"{EVO_NAME} / best"]
    head += ["evo search"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in doc["problems"]:
        search = "-"
        if p.get("evaluations") is not None:
            search = f"{p['evaluations']} evals"
            if p.get("search_s") is not None:
                search += f", {p['search_s']:.0f} s"
        cells = [_problem_label(p)] + [_cell(p, n, ukey, primary) for n in names]
        if versus:
            best, ratio = _best_rival(p, primary, ukey), _evo_vs_best(p, primary, ukey)
            cells += [f"{_fmt(best[1])} ({best[0]})" if best else "-", f"{ratio:.2f}×" if ratio else "-"]
        rows.append("| " + " | ".join(cells + [search]) + " |")
    n_problems = len(doc["problems"])
    cells = []
    for n in names:
        if n == primary:
            cells.append("1.00×")
            continue
        r = _ratios(doc, n)
        g = geomean(r)
        cells.append(f"**{g:.2f}×** ({len(r)}/{n_problems})" if g is not None else "-")
    if versus:
        r = [x for x in (_evo_vs_best(p, primary, ukey) for p in doc["problems"]) if x]
        g = geomean(r)
        low = min(r) if r else None
        cells += ["", f"**{g:.2f}×** ({len(r)}/{n_problems}), lowest {low:.2f}×" if g is not None else "-"]
    rows.append("| " + " | ".join([f"geomean vs {primary}"] + cells + [""]) + " |")
    return "\n".join(rows)


def _roofline_table(doc: dict[str, Any]) -> str | None:
    bound = [p for p in doc["problems"] if p.get("memory_bound")]
    if not bound:
        return None
    names = list(doc.get("contenders") or [])
    head = ["problem", "FLOP/byte", "floor (µs)"] + names
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in bound:
        cells = [_problem_label(p), _fmt(p.get("intensity")),
                 _fmt(p["floor_ms"] * 1e3 if p.get("floor_ms") else None)]
        for n in names:
            c = p["contenders"].get(n, {})
            frac = c.get("copy_fraction") if c.get("status") == "ok" else None
            cells.append(f"{frac * 100:.0f}%" if frac is not None else c.get("status", "-"))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _setup_table(doc: dict[str, Any]) -> str | None:
    """Seconds each contender spent before its first result (autotuning, compiling), beside evo's search."""
    names = [n for n in doc.get("contenders") or [] if any(
        p["contenders"].get(n, {}).get("setup_s") is not None for p in doc["problems"])]
    if not names:
        return None
    head = ["problem"] + names + ["evo search"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in doc["problems"]:
        cells = [_problem_label(p)]
        for n in names:
            s = p["contenders"].get(n, {}).get("setup_s")
            cells.append(f"{s:.1f}" if s is not None else "-")
        cells.append(f"{p['search_s']:.0f}" if p.get("search_s") is not None else "-")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _genome_text(genome: Any) -> str:
    if not isinstance(genome, dict):
        return "-"
    genes = genome.get("genes", genome)
    return " ".join(f"{k}={v}" for k, v in genes.items())


def to_markdown(doc: dict[str, Any]) -> str:
    primary = doc["primary"]
    v = doc.get("versions", {})
    ver = ", ".join(f"{k} {v[k]}" for k in sorted(v))
    out = [f"# evo bench: {doc['operator']} on {doc['gpu']}", ""]
    if doc.get("test_data"):
        out += [f"**TEST DATA — {doc['test_data']}**", ""]
    out += [
        f"Versions: {ver or '-'}." + (" Versions differ between merged runs (see the JSON)."
                                      if doc.get("versions_differ") else ""),
        "",
        "Each problem was measured in one process on one GPU: every contender ran on the same fresh random "
        "inputs and was checked against the higher-precision reference (a wrong output is not timed), then "
        "all were timed interleaved with L2 flushed before every run (by reading 256 MiB where the versions "
        "say l2-flush-read, by a memset otherwise). Cells give the median throughput and, "
        f"in parentheses, the speed relative to {primary} (higher is faster); the JSON beside this file "
        "holds the inter-quartile ranges, set-up (autotuning) times and reasons for anything not timed.",
        "",
    ]
    if doc.get("copy_GBps"):
        out += [f"Device-to-device copy bandwidth measured in the same run: {doc['copy_GBps']:.0f} GB/s "
                "(bytes read plus bytes written).", ""]
    out += [summary_table(doc), ""]
    clocks = clocks_table(doc)
    if clocks:
        out += ["## The clocks a caller sees", "",
                "The table above is GPU time (CUDA events, L2 flushed). A caller in an eager loop pays the call "
                "clock (back-to-back calls, synchronised at the ends of each round: host launch cost included), a "
                "CUDA-graph user the graph clock (replay of captured calls: no host cost). Ratios are the other's "
                "time over evo's (> 1: evo is faster); host µs is one call's host time, the GPU idle before it.",
                "", clocks, ""]
        stuck = not_capturable(doc)
        if stuck:
            out += ["Not capturable in a CUDA graph (no graph clock): " + ", ".join(stuck) + ".", ""]
    roof = _roofline_table(doc)
    if roof:
        out += ["## Memory-bound problems: fraction of copy bandwidth", "",
                "Bytes the operator must move (each input read once, the output written once) per second, "
                "over the copy bandwidth; the floor is those bytes at copy speed.", "", roof, ""]
    setup = _setup_table(doc)
    if setup:
        out += ["## Set-up cost (seconds)", "",
                "Time of each contender's first call (autotuning and compiling included; evo's kernel is already "
                "chosen, so its cost is the search, in the last column).", "", setup, ""]
    genomes = [(p, p.get("evo_genome")) for p in doc["problems"] if p.get("evo_genome")]
    if genomes:
        out += ["## evo kernels", "", "| problem | genome |", "|---|---|"]
        out += [f"| {_problem_label(p)} | {_genome_text(g)} |" for p, g in genomes]
        out.append("")
    notes = [f"- {n} on {_problem_label(p)}: {c['status']} — {c.get('reason') or 'no reason given'}"
             for p in doc["problems"] for n, c in p["contenders"].items() if c.get("status") != "ok"]
    notes += [f"- {f['key']}: not measured — {f.get('reason', '')}" for f in doc.get("failures", [])]
    if notes:
        out += ["## Not timed", ""] + [" ".join(n.split()) for n in notes] + [""]
    return "\n".join(out)


def print_summary(doc: dict[str, Any], paths: tuple[Path, Path | None]) -> None:
    print(summary_table(doc))
    clocks = clocks_table(doc)
    if clocks:
        print(clocks)
    print("wrote " + ", ".join(str(p) for p in paths if p is not None))
