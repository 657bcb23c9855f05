"""The scaling document: per workload and GPU count the rates, busy shares, queue, CPU and time to quality,
judged against issue 46's goals, as one JSON file naming the GPU and the counts, and a short table.

Goals (issue 46): the evaluation rate at least 1.95x the one-GPU rate on 2 GPUs and 3.8x on 4; every GPU worker
busy at least 90% of the search's clock; on 4 GPUs every problem at 99% of the one-GPU run's final elite in at
most 30% of the time the one-GPU run took to get there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.scaling.quality import SHARE, quality_goal, quality_table
from benchmarks.scaling.queue import queue_intervals
from benchmarks.scaling.rates import run_rates, speedups

__all__ = ["SPEED_GOALS", "BUSY_GOAL", "QUALITY_GOALS", "workload_result", "document", "table_lines", "write_doc",
           "gpu_slug", "doc_name"]

SPEED_GOALS = {2: 1.95, 4: 3.8}  # GPU count -> evaluations per minute over the one-GPU run's
BUSY_GOAL = 0.9  # each GPU worker's share of the search's clock
QUALITY_GOALS = {4: 0.30}  # GPU count -> largest share of the reference's time to quality

HOW = ("one run per GPU count, each with a fresh Triton cache and results database, its GPUs by CUDA_VISIBLE_DEVICES; "
       "rate = evaluations stored / the search's clock (the problems' wall_s: each from its first measured "
       "candidate, Ray's start excluded); busy share = a worker's rows' measuring time / that clock; driver_cpu_share "
       "= the search process's CPU seconds (cpu_s) / that clock; time to quality = seconds on a problem's clock "
       "(from its first measured row) until its best correct time came within 99% of the reference (fewest GPUs) "
       "run's final elite, rows taken in the order they finished")


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (the name in the file's name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def doc_name(gpu: str, tag: str | None = None) -> str:
    return f"scaling-{gpu_slug(gpu)}{'-' + gpu_slug(tag) if tag else ''}.json"


def _run_entry(record: Any, measure: Mapping[str, Any], planned: Sequence[str]) -> dict[str, Any]:
    entry = run_rates(record.all_rows, record.clocks, record.cpu, list(record.queues.values()))
    not_ended = [k for k in planned if k not in record.ended]
    entry.update(problems_planned=len(planned), problems_ended=len(planned) - len(not_ended), not_ended=not_ended,
                 skipped_rows=record.skipped_rows)
    for k in ("exit_status", "interrupted", "evo_s", "machine_cpu_busy", "evo_tree_cores", "cpus",
              "cuda_visible_devices", "command"):
        entry[k] = measure.get(k)
    entry["queue_over_time"] = queue_intervals([tuple(s) for s in measure.get("queue_snapshots", [])])
    entry["rows_over_time"] = measure.get("rows_over_time", [])
    return entry


def workload_result(description: str, settings: Mapping[str, Any], planned: Sequence[str],
                    records: Mapping[int, Any], measures: Mapping[int, Mapping[str, Any]],
                    skipped: Mapping[int, str] | None = None) -> dict[str, Any]:
    """One workload's part of the document, from its runs' records (benchmarks.scaling.stores.RunRecord) and
    measures by GPU count (the fewest GPUs are the reference); `skipped`: counts not run, and why."""
    out: dict[str, Any] = {"description": description, **dict(settings), "problems": list(planned),
                           "skipped": {str(n): why for n, why in sorted((skipped or {}).items())}}
    if not records:
        out["runs"] = {}
        return out
    reference = min(records)
    runs = {n: _run_entry(records[n], measures.get(n, {}), planned) for n in sorted(records)}
    out["reference_gpus"] = reference
    out["runs"] = {str(n): r for n, r in runs.items()}
    out["speedup"] = speedups({n: r["per_minute"] for n, r in runs.items()}, reference)
    out["ok_speedup"] = speedups({n: r["ok_per_minute"] for n, r in runs.items()}, reference)
    table = quality_table({n: records[n].rows for n in records}, reference, SHARE)
    out["time_to_quality"] = {"share": SHARE, "problems": table}
    goals: dict[str, Any] = {}
    for n, goal in SPEED_GOALS.items():
        got = out["speedup"].get(str(n))
        if reference == 1 and n in runs:
            goals[f"speedup_{n}gpus"] = {"goal": goal, "got": got, "met": got is not None and got >= goal}
    for n, r in runs.items():
        low = r["busy_share_min"]
        goals[f"busy_{n}gpus"] = {"goal": BUSY_GOAL, "got": low, "met": low is not None and low >= BUSY_GOAL}
    for n, share in QUALITY_GOALS.items():
        if reference == 1 and n in runs:
            goals[f"time_to_quality_{n}gpus"] = quality_goal(table, n, reference, share)
    out["goals"] = goals
    return out


def _f(x: Any, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def table_lines(doc: Mapping[str, Any]) -> list[str]:
    """The short table printed last: per workload and GPU count, the rates, busy shares, queue, CPU and quality."""
    lines = [f"scaling on {doc.get('gpu')} ({doc.get('gpus_on_machine')} on the machine), counts {doc.get('counts')}"]
    head = (f"{'GPUs':>4} {'eval/min':>9} {'ok/min':>8} {'speedup':>8} {'busy min/mean':>14} "
            f"{'queue wait/comp/ready':>22} {'driver':>7} {'to 99%':>10} {'ended':>7}")
    for name, w in doc.get("workloads", {}).items():
        lines += ["", f"{name}: {w.get('description', '')}", head]
        for n, r in w.get("runs", {}).items():
            q = r.get("compile_queue") or {}
            queue = "/".join(_f((q.get(s) or {}).get("mean"), "{:.1f}") for s in ("waiting", "compiling", "ready"))
            ttq = w.get("time_to_quality", {}).get("problems", {})
            reached = [p["runs"].get(n, {}) for p in ttq.values() if p.get("target_ms") is not None]
            got = sum(1 for p in reached if p.get("reached"))
            busy = f"{_f(r.get('busy_share_min'), '{:.2f}')}/{_f(r.get('busy_share_mean'), '{:.2f}')}"
            lines.append(f"{n:>4} {_f(r.get('per_minute')):>9} {_f(r.get('ok_per_minute')):>8} "
                         f"{_f(w.get('speedup', {}).get(n), '{:.2f}x'):>8} {busy:>14} {queue:>22} "
                         f"{_f(r.get('driver_cpu_share'), '{:.2f}'):>7} {f'{got}/{len(reached)}':>10} "
                         f"{r.get('problems_ended')}/{r.get('problems_planned')}")
        for n, why in w.get("skipped", {}).items():
            lines.append(f"{n:>4} skipped: {why}")
        for goal, g in w.get("goals", {}).items():
            lines.append(f"  goal {goal}: {'met' if g.get('met') else 'missed' if g.get('met') is False else 'n/a'}"
                         + (f" ({g.get('got')} vs {g.get('goal')})" if "goal" in g else
                            f" ({g.get('problems_met')}/{g.get('problems')} problems within "
                            f"{g.get('max_share_of_reference_time')} of the reference's time)"))
    return lines


def write_doc(doc: Mapping[str, Any], out: Path, tag: str | None = None) -> Path:
    """The document as OUT/scaling-<gpu>[-<tag>].json; its path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / doc_name(str(doc.get("gpu", "unknown")), tag)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def document(gpu: str, gpus_on_machine: int, counts: Sequence[int], workloads: Mapping[str, Any],
             extra: Mapping[str, Any]) -> dict[str, Any]:
    """The whole document (`extra`: date, versions, code, settings)."""
    return {"gpu": gpu, "gpus_on_machine": gpus_on_machine, "counts": list(counts), **dict(extra),
            "goals": {"speedup": {str(k): v for k, v in SPEED_GOALS.items()}, "worker_busy_share": BUSY_GOAL,
                      "time_to_quality_share_of_one_gpu_time": {str(k): v for k, v in QUALITY_GOALS.items()}},
            "how": HOW, "workloads": dict(workloads)}
