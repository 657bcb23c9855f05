"""What a scaling measurement runs once per GPU count: an experiment's problems one after the other through
`evo run` (its budget replaced by a wall time per problem), or a model's whole zoo through `evo zoo MODEL --run`
(every operator's experiment in one run, as a user searches a model).

A workload is planned once, before any GPU work: the experiment is parsed (a bad file or choice is one line), the
zoo is planned by `evo zoo` itself into a folder of its own (its refusals are its one line). Each run then gets the
command and the environment that make it a run of its own: its GPUs (`CUDA_VISIBLE_DEVICES`, and `executor.gpus`
for an experiment), a fresh Triton cache and a fresh results database, so that no run is served or compiled faster
from what an earlier one measured or cached.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Workload", "experiment_workload", "zoo_workload", "scaled_experiment", "chosen_problems", "run_env"]


@dataclass(frozen=True)
class Workload:
    """One thing to search per GPU count: `name` (its folder and its key in the JSON), the problems it plans and
    how to start a run of it."""

    name: str
    description: str
    problems: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    experiment_text: str | None = None  # an experiment: its YAML, per-problem wall time set, GPUs still to set
    zoo_args: tuple[str, ...] = ()  # a zoo: `evo zoo` arguments before `-o DIR --run`

    def command(self, gpus: int, folder: Path) -> list[str]:
        """The `evo` command of the run on `gpus` GPUs in `folder` (an experiment's YAML is written there)."""
        folder.mkdir(parents=True, exist_ok=True)
        if self.experiment_text is not None:
            exp = folder / "experiment.yaml"
            doc = yaml.safe_load(self.experiment_text)
            doc["name"] = f"{doc['name']}-{gpus}gpu"
            doc["executor"] = {**(doc.get("executor") or {}), "gpus": gpus}
            exp.write_text(yaml.safe_dump(doc, sort_keys=False))
            return [sys.executable, "-m", "evo", "run", str(exp), "--out", str(folder / "run")]
        return [sys.executable, "-m", "evo", "zoo", *self.zoo_args, "-o", str(folder / "zoo"), "--run"]


def run_env(gpus: int, folder: Path, cache_root: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one run: the first `gpus` of the GPUs this process may use, a Triton cache and a
    results database of the run's own (the cache under `cache_root`, kept apart from what is kept of runs)."""
    env = dict(os.environ if base is None else base)
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    env["CUDA_VISIBLE_DEVICES"] = ",".join(visible[:gpus] if visible else map(str, range(gpus)))
    env["TRITON_CACHE_DIR"] = str(cache_root / f"triton-{folder.parent.name}-{folder.name}")
    env["EVO_RESULTS_DB"] = str(folder / "results.sqlite")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def chosen_problems(choice: Sequence[str] | None, count: int) -> list[int]:
    """The 0-based positions `choice` names among `count` problems ('all', 1-based positions, or None: all);
    ValueError (one line) if bad."""
    if choice is None or list(choice) == ["all"]:
        return list(range(count))
    if not all(p.isdigit() and 1 <= int(p) <= count for p in choice) or len(set(choice)) != len(choice):
        raise ValueError(f"--problems {' '.join(choice)}: expected 'all' or distinct positions in 1-{count}")
    return [int(p) - 1 for p in choice]


def scaled_experiment(text: str, problem_keys: str | Sequence[str], gpus: int, wall_s: float, name: str,
                      surrogate: bool | None = None, evaluations: int | None = None) -> str:
    """The experiment's YAML for one run: its problem alone (or the problems, in the order given), on `gpus` GPUs,
    for `wall_s` seconds each (and at most `evaluations`); `surrogate` True puts the guided emitter in, False
    leaves it out, None keeps the experiment's emitters."""
    from evo.experiment.spec import DEFAULT_EMITTER_SPECS

    doc = yaml.safe_load(text)
    keys = [problem_keys] if isinstance(problem_keys, str) else list(problem_keys)
    groups = [{"shapes": [shape], "dtypes": [dtype]} for _, shape, dtype in (k.rsplit(":", 2) for k in keys)]
    doc.update(name=name, problems=groups[0] if len(groups) == 1 else groups,
               budget={"evaluations": evaluations, "wall_s": wall_s, "stagnation": None})
    doc["executor"] = {**(doc.get("executor") or {}), "kind": "ray", "gpus": gpus}
    doc["memory"] = False  # a throughput measurement: nothing served from the results of earlier runs
    doc.pop("output", None)
    if surrogate is not None:
        emitters = list(doc.get("emitters") or [e.name for e in DEFAULT_EMITTER_SPECS])
        guided = [e for e in emitters if (e if isinstance(e, str) else e.get("name")) == "guided"]
        if surrogate and not guided:
            emitters.append("guided")
        if surrogate is False:
            emitters = [e for e in emitters if not any(e is g for g in guided)]
        if emitters != [e.name for e in DEFAULT_EMITTER_SPECS] or "emitters" in doc:
            doc["emitters"] = emitters
    return yaml.safe_dump(doc, sort_keys=False)


def experiment_workload(path: str | Path, problems: Sequence[str] | None, run_s: float, surrogate: bool | None,
                        evaluations: int | None = None) -> Workload:
    """The experiment at `path`, the chosen problems in turn, `run_s` seconds shared evenly by them. ValueError
    (one line) for a file that is missing or invalid, a choice of problems that is not there, or a smoke
    experiment."""
    from evo.experiment.config import ConfigError, load_experiment

    path = Path(path)
    try:
        experiment = load_experiment(path)  # a missing, unreadable or invalid file: its one line
    except ConfigError as e:
        raise ValueError(str(e).splitlines()[0]) from None
    text = path.read_text()
    if experiment.executor.kind == "smoke":
        raise ValueError(f"{path}: a smoke experiment times nothing; choose one that runs on GPUs")
    keys = [experiment.problems[i].key for i in chosen_problems(problems, len(experiment.problems))]
    wall_s = round(run_s / len(keys), 3)
    name = path.stem if len(keys) == len(experiment.problems) else f"{path.stem}-{len(keys)}problems"
    scaled = scaled_experiment(text, keys, 1, wall_s, name, surrogate, evaluations)
    return Workload(name=name, description=f"evo run {path.name}: {len(keys)} problems in turn, {wall_s:g} s each",
                    problems=tuple(keys), experiment_text=scaled,
                    settings={"experiment": path.name, "wall_s_per_problem": wall_s, "evaluations_per_problem":
                              evaluations, "surrogate": "default emitters" if surrogate is None else surrogate})


def zoo_workload(model: str | Path, tokens: str, context: int, wall_s: float, evaluations: int | None,
                 plan_dir: Path) -> Workload:
    """A model's zoo as `evo zoo MODEL --run` searches it, planned by `evo zoo` into `plan_dir` (new or empty: the
    plan is read back from it) first. ValueError (one line: `evo zoo`'s own) when the model or the options are
    refused."""
    if plan_dir.exists() and any(plan_dir.iterdir()):
        raise ValueError(f"{plan_dir}: already holds files; the zoo is planned into a new or empty folder")
    args = [str(model), "--tokens", tokens, "--context", str(context), "--wall-s", f"{wall_s:g}"]
    if evaluations is not None:
        args += ["--evaluations", str(evaluations)]
    done = subprocess.run([sys.executable, "-m", "evo", "zoo", *args, "-o", str(plan_dir)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        why = re.sub(r"^evo: error: ", "", lines[-1]) if lines else f"exit status {done.returncode}"
        raise ValueError(f"evo zoo {model}: {why}")
    from evo.experiment.config import load_experiment

    files = sorted(plan_dir.glob("*/*.yaml"))
    keys = [p.key for f in files for p in load_experiment(f).problems]
    if not keys:
        raise ValueError(f"evo zoo {model}: planned no problem (under {plan_dir})")
    model_name = files[0].parent.name
    return Workload(name=f"zoo-{model_name}",
                    description=f"evo zoo {Path(model).name} --tokens {tokens} --context {context} --run: "
                                f"{len(files)} operators, {len(keys)} problems, {wall_s:g} s each",
                    problems=tuple(keys), zoo_args=tuple(args),
                    settings={"model": Path(model).name, "tokens": tokens, "context": context,
                              "wall_s_per_problem": wall_s, "evaluations_per_problem": evaluations,
                              "operators": len(files), "surrogate": "default emitters (the guided one in)"})
