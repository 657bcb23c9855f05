"""The launch benchmark's files: `launch-<gpu slug>.json` and a markdown table beside it (benchmarks.launch).

One document holds every problem of the experiments measured, one GPU model:

    {"schema": 1, "kind": "launch", "gpu": "NVIDIA H100 80GB HBM3", "versions": {...}, "settings": {...},
     "problems": [{"experiment": "bench_softmax", "operator": "softmax", "key": "softmax:8192x8192:bf16",
                   "rows": 8192, "cols": 8192, "dtype": "bf16", "dims": ["rows", "cols"], "primary": "torch_eager",
                   "objective": "call", "kernel": ".../softmax_8192x8192_bf16.py",
                   "contenders": {"torch_eager": {"status": "ok", "median_ms": ..., "call_ms": ..., "graph_ms": ...,
                                                  "host_us": ..., "ratio": 1.0, "call_ratio": 1.0, ...},
                                  "torch_compile": {...}, "evo": {...}},
                   "selfcheck": {the exported module's _evo_measure()}, "selfcheck_ratio": 1.31,
                   "header_ratio": 1.28}, ...],
     "failures": [{"key": ..., "reason": ...}]}

Ratios are the other contender's time over evo's on the same clock (> 1: evo is faster). `selfcheck_ratio` is
the exported module's own measurement, on the run's objective clock, of the kernel against its baseline;
`header_ratio` the one its header states (the search's).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evo.bench.cells import EVO_NAME, fmt, geomean, gpu_slug, problem_label, speedup
from evo.store.atomic_file import write_atomic

__all__ = ["SCHEMA", "RIVAL", "CLOCKS", "launch_paths", "write_launch", "launch_table", "to_markdown"]

SCHEMA = 1
RIVAL = "torch_compile"  # besides the primary, what a user would pick instead of evo
# (JSON key of a contender's time, label): every clock the launch bench compares
CLOCKS = (("median_ms", "GPU"), ("call_ms", "call"), ("graph_ms", "graph"))


def launch_paths(doc: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    stem = f"launch-{gpu_slug(doc['gpu'])}"
    return Path(out_dir) / f"{stem}.json", Path(out_dir) / f"{stem}.md"


def write_launch(doc: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Write `launch-<gpu slug>.json` and `.md` under `out_dir`; returns their paths."""
    missing = [k for k in ("schema", "gpu", "versions", "problems") if k not in doc]
    if missing:
        raise ValueError(f"not a launch benchmark document, missing {', '.join(missing)}")
    json_path, md_path = launch_paths(doc, out_dir)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, json.dumps(doc, indent=1) + "\n")
    write_atomic(md_path, to_markdown(doc))
    return json_path, md_path


def merge_launch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new` joined to `old` (one GPU model): problems measured again replace their entries, the rest are kept."""
    if old.get("gpu") != new.get("gpu"):
        raise ValueError(f"cannot merge a launch bench of {new.get('gpu')} into one of {old.get('gpu')}")
    keys = {p["key"] for p in new["problems"]}
    done = keys | {f["key"] for f in new.get("failures", [])}
    merged = dict(new, problems=[p for p in old["problems"] if p["key"] not in keys] + new["problems"],
                  failures=[f for f in old.get("failures", []) if f["key"] not in done] + new.get("failures", []))
    experiments = old.get("settings", {}).get("experiments", []) + new.get("settings", {}).get("experiments", [])
    merged["settings"] = dict(new.get("settings", {}), experiments=list(dict.fromkeys(experiments)))
    merged["wall_s"] = round(old.get("wall_s", 0) + new.get("wall_s", 0), 1)
    return merged


def goal_misses(doc: dict[str, Any]) -> list[str]:
    """Issue 23's goals, per problem: evo's host µs per call <= the primary's; the call-clock ratio >= 0.97 x
    min(GPU-time ratio, 1) and the graph-clock ratio >= 0.97 x the GPU-time ratio, both against the primary; the
    exported module's self-check within 5% of its header. One line per miss."""
    misses = []
    for p in doc["problems"]:
        label, primary = problem_label(p), p["primary"]
        gpu, call, graph = (_versus(p, primary, key) for key, _ in CLOCKS)
        host, host_primary = _time(p, EVO_NAME, "host_us"), _time(p, primary, "host_us")
        if host is not None and host_primary is not None and host > host_primary:
            misses.append(f"{label}: host {host:.1f} µs per call, {primary} {host_primary:.1f} µs")
        if gpu is not None and call is not None and call < 0.97 * min(gpu, 1.0):
            misses.append(f"{label}: call-clock ratio {call:.2f}× under 0.97 × min(GPU-time ratio {gpu:.2f}×, 1)")
        if gpu is not None and graph is not None and graph < 0.97 * gpu:
            misses.append(f"{label}: graph-clock ratio {graph:.2f}× under 0.97 × GPU-time ratio {gpu:.2f}×")
        check, header = p.get("selfcheck_ratio"), p.get("header_ratio")
        if check is not None and header and abs(check / header - 1) > 0.05:
            misses.append(f"{label}: self-check {check:.2f}× against the header's {header:.2f}×")
    return misses


def _time(p: dict[str, Any], name: str, key: str) -> float | None:
    c = p["contenders"].get(name, {})
    return c.get(key) if c.get("status") == "ok" else None


def _versus(p: dict[str, Any], name: str, key: str) -> float | None:
    return speedup(_time(p, name, key), _time(p, EVO_NAME, key))


def _x(r: float | None) -> str:
    return f"{r:.2f}×" if r is not None else "-"


def launch_table(doc: dict[str, Any]) -> str:
    """One row per problem: evo's ratio to the primary and to torch.compile on GPU time, the call clock and the
    graph clock; host µs of one call of each; the exported module's own ratio beside its header's."""
    head = ["problem", "primary", "objective"]
    head += [f"evo / primary ({label})" for _, label in CLOCKS] + [f"evo / {RIVAL} ({label})" for _, label in CLOCKS]
    head += [f"host µs primary / {RIVAL} / evo", "self-check ratio (header)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    columns: list[list[float]] = [[] for _ in range(2 * len(CLOCKS))]
    for p in doc["problems"]:
        primary = p["primary"]
        ratios = [_versus(p, primary, key) for key, _ in CLOCKS] + [_versus(p, RIVAL, key) for key, _ in CLOCKS]
        for col, r in zip(columns, ratios, strict=True):
            col += [r] if r is not None else []
        host = " / ".join(fmt(_time(p, n, "host_us")) for n in (primary, RIVAL, EVO_NAME))
        selfcheck = "-"
        if p.get("selfcheck_ratio") is not None:
            header = p.get("header_ratio")
            selfcheck = f"{p['selfcheck_ratio']:.2f}× ({_x(header) if header is not None else 'none'})"
        elif p.get("selfcheck_error"):
            selfcheck = "failed"
        cells = [f"{p.get('operator', '')} {problem_label(p)}".strip(), primary, p.get("objective") or "-"]
        rows.append("| " + " | ".join(cells + [_x(r) for r in ratios] + [host, selfcheck]) + " |")
    n = len(doc["problems"])
    means = [geomean(col) for col in columns]
    foot = [f"geomean ({n} problems)", "", ""]
    foot += [f"**{g:.2f}×** ({len(col)}/{n})" if g is not None else "-" for g, col in zip(means, columns, strict=True)]
    rows.append("| " + " | ".join(foot + ["", ""]) + " |")
    return "\n".join(rows)


def to_markdown(doc: dict[str, Any]) -> str:
    v = doc.get("versions", {})
    out = [f"# evo launch bench on {doc['gpu']}", ""]
    if doc.get("test_data"):
        out += [f"**TEST DATA — {doc['test_data']}**", ""]
    out += [
        f"Versions: {', '.join(f'{k} {v[k]}' for k in sorted(v)) or '-'}.", "",
        "Per problem, in one process on one GPU and the same inputs: the operator's primary baseline (cuBLAS for "
        f"GEMM, torch eager otherwise), {RIVAL} and evo's elite loaded from its exported module, each checked "
        "against the reference, then timed on four clocks: GPU time (CUDA events, L2 flushed), the call clock "
        "(back-to-back eager calls: host launch cost included), the graph clock (CUDA-graph replay: none) and "
        "host µs of one call. Ratios are the other's time over evo's (> 1: evo is faster). The self-check ratio is "
        "the exported module's own `_evo_measure()` on the run's objective clock, beside its header's figure.",
        "", launch_table(doc), "",
    ]
    misses = goal_misses(doc)
    out += ["## Goals (issue 23)", "",
            "Host µs per call ≤ the primary's; call-clock ratio ≥ 0.97 × min(GPU-time ratio, 1); graph-clock ratio "
            "≥ 0.97 × GPU-time ratio; self-check within 5% of the header. "
            + (f"{len(misses)} misses:" if misses else "Every problem meets them."), ""]
    out += [f"- {m}" for m in misses] + ([""] if misses else [])
    notes = [f"- {n} on {problem_label(p)}: {c['status']} — {c.get('reason') or 'no reason given'}"
             for p in doc["problems"] for n, c in p["contenders"].items() if c.get("status") != "ok"]
    notes += [f"- {n} on {problem_label(p)}: not capturable in a CUDA graph" for p in doc["problems"]
              for n, c in p["contenders"].items() if c.get("call_ms") is not None and c.get("graph_ms") is None]
    notes += [f"- self-check of {problem_label(p)}: {p['selfcheck_error']}" for p in doc["problems"]
              if p.get("selfcheck_error")]
    notes += [f"- {f['key']}: not measured — {f.get('reason', '')}" for f in doc.get("failures", [])]
    if notes:
        out += ["## Notes", ""] + [" ".join(n.split()) for n in notes] + [""]
    return "\n".join(out)
