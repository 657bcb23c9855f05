"""What a resume may change: a resumed run rebuilds its archive from rows the earlier sessions made, so an
experiment that now differs in anything that decides results (problems, genes allowed, descriptors, variation,
seed, how kernels are judged) would mix two searches in one store. Such a resume is refused, naming each
difference, unless the user allows it; then the run records what changed. The budget, the output folder and where
work runs (Ray address, worker counts, dashboard) may change freely.

What decides results is kept in the store's metadata (`deciding`) at every session and compared there, so the
check does not depend on the copied YAML still loading. The run directory's `experiment.yaml` always holds the
experiment of the latest session; the text it replaced is kept in the store's metadata (`resumes`), so nothing
about an earlier session is lost.
"""

from __future__ import annotations

import json
import time
from typing import Any

from evo.experiment.spec import Experiment

__all__ = ["deciding", "experiment_changes", "record_resume"]

# (label, how to read it from an Experiment): everything that changes what a search finds or how it is judged
_DECIDING: tuple[tuple[str, Any], ...] = (
    ("operator", lambda e: e.operator),
    ("problems", lambda e: [p.key for p in e.problems]),
    ("genome", lambda e: {k: list(v) for k, v in sorted(e.genome.items())}),
    ("descriptors", lambda e: [d.name + (f" edges {list(d.edges)}" if d.edges else "") for d in e.descriptors]),
    ("mutators", lambda e: dict(sorted(e.mutators.items()))),
    ("selection", lambda e: e.selection),
    ("initial_random", lambda e: e.initial_random),
    ("transfer", lambda e: e.transfer),
    ("seed", lambda e: e.seed),
    ("executor.kind", lambda e: e.executor.kind if e.executor.kind == "smoke" else "ray/local (GPU)"),
    ("evaluation.reps", lambda e: e.evaluation.reps),
    ("evaluation.warmup", lambda e: e.evaluation.warmup),
    ("evaluation.timeout_s", lambda e: e.evaluation.timeout_s),
    ("evaluation.compile_timeout_s", lambda e: e.evaluation.compile_timeout_s),
    ("evaluation.noise_margin", lambda e: e.evaluation.noise_margin),
    ("evaluation.objective", lambda e: e.evaluation.objective),
)
# What a run recorded before a deciding setting existed did, where that is known: every run before the objective
# was judged by GPU time, so resuming one under the call clock is a change (its archive would mix the clocks).
_BEFORE_IT_EXISTED: dict[str, Any] = {"evaluation.objective": "gpu"}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def deciding(experiment: Experiment) -> dict[str, Any]:
    """The settings of `experiment` that decide results, as JSON values (what the store keeps)."""
    return json.loads(json.dumps({label: read(experiment) for label, read in _DECIDING}))


def experiment_changes(before: dict[str, Any], now: Experiment) -> list[str]:
    """One phrase per deciding setting that differs from `before` (a `deciding` dict, possibly from an older
    version with fewer keys: a key it lacks is not compared, unless what it was then is known), e.g.
    "seed: 0 -> 1"; [] if none."""
    before = {**_BEFORE_IT_EXISTED, **before} if before else {}  # nothing recorded: nothing to compare
    out = []
    for label, value in deciding(now).items():
        if label in before and before[label] != value:
            out.append(f"{label}: {_short(before[label])} -> {_short(value)}")
    return out


def record_resume(store: Any, session: int, changes: list[str], previous_text: str | None) -> None:
    """Append this resume to the store's `resumes` list: its session, the changes allowed, and the experiment
    text it replaced (None when the text did not change)."""
    history = list(store.meta("resumes", []))
    history.append({"session": session, "at": time.time(), "changes": changes, "previous_experiment": previous_text})
    store.set_meta("resumes", history)
