"""One scaling session: every workload on every GPU count, one run at a time (each has the machine to itself),
under an overall deadline, each run kept as soon as it ends.

A run that cannot start with at least `min_run_s` left before the deadline is skipped and says so in the document;
one that is still going at the deadline is stopped as a user stops one (SIGINT: what completed is stored) and is
counted on the clock its problems saved. `session.json` records what was planned and what was skipped, so the
folder alone gives the document (benchmarks.scaling.analyse).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.scaling.runner import keep_run, run_once
from benchmarks.scaling.stores import SESSION, run_folder
from benchmarks.scaling.workloads import Workload

__all__ = ["run_session"]

_AFTER_S = 20.0  # kept back from the deadline for keeping the last run and writing the document


def _write(root: Path, session: dict[str, Any]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / SESSION).write_text(json.dumps(session, indent=1) + "\n")


def run_session(workloads: Sequence[Workload], counts: Sequence[int], work: Path, keep: Path | None,
                cache_root: Path, header: dict[str, Any], deadline_s: float | None = None,
                min_run_s: float = 60.0, say: Any = print) -> Path:
    """Run each workload on each count in `work`; the folder holding the session (`keep` when given: each run
    copied there, without kernel texts, as it ends)."""
    started = time.monotonic()
    session = {**header, "counts": list(counts),
               "workloads": {w.name: {**{k: v for k, v in asdict(w).items() if k in ("description", "settings")},
                                      "problems": list(w.problems), "skipped": {}} for w in workloads}}
    roots = [work] + ([keep] if keep is not None else [])
    for root in roots:
        _write(root, session)
    for w in workloads:
        for n in counts:
            left = None if deadline_s is None else deadline_s - (time.monotonic() - started) - _AFTER_S
            if left is not None and left < min_run_s:
                why = f"deadline: {max(0.0, left):.0f} s left of the session's {deadline_s:g} s"
                session["workloads"][w.name]["skipped"][str(n)] = why
                say(f"[scaling] {w.name} on {n} GPU(s) skipped ({why})")
                for root in roots:
                    _write(root, session)
                continue
            folder = run_folder(work, w.name, n)
            say(f"[scaling] {w.name} on {n} GPU(s): {w.description}"
                + (f" (stopped after {left:.0f} s at the latest)" if left is not None else ""))
            m = run_once(w, n, folder, cache_root, left)
            say(f"[scaling] {w.name} on {n} GPU(s): exit status {m['exit_status']}"
                f"{' (stopped at the deadline)' if m['interrupted'] else ''} after {m['evo_s']:.0f} s; "
                f"machine CPU busy {m['machine_cpu_busy']}")
            if m["exit_status"] != 0:
                say("\n".join(m["log_tail"][-8:]))
            if keep is not None:
                keep_run(folder, run_folder(keep, w.name, n))
    return keep if keep is not None else work
