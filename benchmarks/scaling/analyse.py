"""The scaling document from a session's folder alone: its `session.json` (the workloads, the GPU and the counts)
and, per workload and GPU count, the run's stores and `measure.json`. The same code reads the folder a session
has just filled and one kept from an earlier session (`--keep`, then `--analyse`), so the figures can always be
computed again from what was kept (the folder's layout: benchmarks.scaling.stores).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.scaling.report import document, workload_result
from benchmarks.scaling.stores import MEASURE, SESSION, read_run, run_folder

__all__ = ["analyse", "read_session"]


def read_session(root: Path) -> dict[str, Any]:
    """The folder's session.json; ValueError (one line) when it is missing or not one."""
    path = root / SESSION
    try:
        session = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{root}: no {SESSION} here (not a folder a scaling session kept)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot be read ({e})") from None
    if not isinstance(session, dict) or not isinstance(session.get("workloads"), dict):
        raise ValueError(f"{path}: not a scaling session (no workloads)")
    return session


def analyse(root: Path) -> dict[str, Any]:
    """The document of the session kept in `root` (a run whose folder holds no measure.json did not run)."""
    session = read_session(root)
    results = {}
    for name, w in session["workloads"].items():
        records, measures = {}, {}
        for n in session.get("counts", []):
            folder = run_folder(root, name, n)
            if not (folder / MEASURE).is_file():
                continue
            measures[n] = json.loads((folder / MEASURE).read_text())
            records[n] = read_run(folder)
        skipped = {int(n): why for n, why in (w.get("skipped") or {}).items()}
        results[name] = workload_result(w.get("description", name), w.get("settings", {}), w.get("problems", []),
                                        records, measures, skipped)
    extra = {k: session.get(k) for k in ("date", "versions", "code", "cpus")}
    return document(session.get("gpu", "unknown"), session.get("gpus_on_machine", 0), session.get("counts", []),
                    results, extra)
