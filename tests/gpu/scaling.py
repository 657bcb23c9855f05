"""How evaluation throughput scales with GPUs (a GPU script): candidates evaluated per minute for one experiment
on 1 GPU, then on 2 (or the counts given), each for the same fixed wall time, through the normal `evo run` path.

    python -m tests.gpu.scaling [--experiment experiments/quick_gemm.yaml] [--problem 1] [--minutes 3]
                                [--gpus 1 2] [--out reports/gpu]

For each GPU count the experiment's chosen problem is searched alone, with `executor.gpus` set to the count and
the budget replaced by the wall time (no evaluation or stagnation limit), by `evo run` in a subprocess, with a
Triton cache of its own (so that no run compiles faster on what an earlier one cached). The rate is the
evaluations stored divided by the search's own clock for the problem (`wall_s:<problem>` in the store, which
excludes starting Ray); the rate of correct, timed kernels is given beside it. The result, with the GPU named,
goes to OUT/scaling-<gpu>.json (and to $EVO_OUT, where the device tool collects it). Goal: at least 1.9x the
one-GPU rate on two GPUs.

Without CUDA, or with fewer GPUs than asked for, it says so in one line and exits with status 2, before any work.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

__all__ = ["build_parser", "scaled_experiment", "count_rate", "gpu_slug", "main"]

GOAL = 1.9
ROOT = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.gpu.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", default=str(ROOT / "experiments" / "quick_gemm.yaml"), help="experiment file")
    p.add_argument("--problem", type=int, default=1, help="1-based position of the problem to search (default 1)")
    p.add_argument("--minutes", type=float, default=3.0, help="wall time of each run (default 3)")
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2], help="GPU counts to compare (default 1 2)")
    p.add_argument("--out", default=str(ROOT / "reports" / "gpu"), help="folder of the JSON (default reports/gpu)")
    return p


def check_args(args: argparse.Namespace) -> str | None:
    """A one-line complaint about the arguments, else None (no GPU needed)."""
    from evo.experiment.config import ConfigError, load_experiment

    if not 0 < args.minutes <= 60:
        return f"--minutes {args.minutes:g}: expected more than 0 and at most 60"
    if any(n < 1 for n in args.gpus) or len(set(args.gpus)) != len(args.gpus):
        return f"--gpus {args.gpus}: expected distinct counts of at least 1"
    try:
        experiment = load_experiment(args.experiment)
    except ConfigError as e:
        return str(e)
    if experiment.executor.kind == "smoke":
        return f"{args.experiment}: a smoke experiment times nothing; choose one that runs on GPUs"
    if not 1 <= args.problem <= len(experiment.problems):
        return f"--problem {args.problem}: the experiment has problems 1-{len(experiment.problems)}"
    return None


def scaled_experiment(text: str, problem_key: str, gpus: int, wall_s: float, name: str) -> str:
    """The experiment's YAML for one run: its problem alone, on `gpus` GPUs, for `wall_s` seconds."""
    doc = yaml.safe_load(text)
    operator, shape, dtype = problem_key.split(":")
    doc.update(name=name, problems={"shapes": [shape], "dtypes": [dtype]},
               budget={"evaluations": None, "wall_s": wall_s, "stagnation": None})
    doc["executor"] = {**(doc.get("executor") or {}), "kind": "ray", "gpus": gpus}
    doc["memory"] = False  # a throughput measurement: nothing served from the results of earlier runs
    doc.pop("output", None)
    return yaml.safe_dump(doc, sort_keys=False)


def count_rate(store_path: Path, problem_key: str) -> dict[str, Any]:
    """Evaluations and correct ones per minute of the search's clock for `problem_key`, and where the time of
    each went: how busy each GPU worker was, and the mean seconds of compiling and of each measuring phase."""
    from evo.store import Store

    with Store(store_path, readonly=True) as store:
        rows = store.evaluations(problem_key)
        clock = float(store.meta(f"wall_s:{problem_key}", 0.0))
    ok = sum(r.status == "ok" for r in rows)
    minutes = clock / 60 if clock else float("nan")
    busy: dict[str, float] = {}
    for r in rows:
        if r.worker:
            busy[r.worker] = busy.get(r.worker, 0.0) + max(0.0, r.finished_at - r.started_at)

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    phases = [r.resources.get("eval", {}) for r in rows if isinstance(r.resources.get("eval"), dict)]
    return {"evaluations": len(rows), "ok": ok, "search_s": round(clock, 2),
            "per_minute": round(len(rows) / minutes, 1) if clock else None,
            "ok_per_minute": round(ok / minutes, 1) if clock else None,
            "workers": sorted(busy),
            "worker_busy_share": {w: round(b / clock, 3) for w, b in sorted(busy.items())} if clock else {},
            "mean_s": {"compile": mean([r.compile_s for r in rows if r.compile_s is not None]),
                       **{k: mean([p[k] for p in phases if isinstance(p.get(k), (int, float))])
                          for k in ("load_s", "check_s", "time_s")}}}


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of this machine since boot (Linux /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (the name in the file's name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _run(yaml_text: str, work: Path, n: int) -> tuple[Path, float | None]:
    exp = work / f"scaling-{n}gpu.yaml"
    exp.write_text(yaml_text)
    run = work / f"run-{n}gpu"
    env = dict(os.environ, TRITON_CACHE_DIR=str(work / f"triton-cache-{n}gpu"))
    t0, ticks0 = time.monotonic(), _cpu_ticks()
    done = subprocess.run([sys.executable, "-m", "evo.surface.cli", "run", str(exp), "--out", str(run)], env=env,
                          cwd=ROOT, text=True, capture_output=True)
    print(done.stdout[-3000:], flush=True)
    if done.returncode != 0:
        raise SystemExit(f"evo run on {n} GPU(s) failed with status {done.returncode}: {done.stderr[-2000:]}")
    busy, total = (b - a for a, b in zip(ticks0, _cpu_ticks(), strict=True))
    cpu = round(busy / total, 3) if total else None
    print(f"[scaling] {n} GPU(s): evo run took {time.monotonic() - t0:.0f} s, machine CPU busy {cpu}", flush=True)
    return run / "store.sqlite", cpu


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    complaint = check_args(args)
    if complaint:
        print(f"scaling: {complaint}", file=sys.stderr)
        return 2
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < max(args.gpus):
        print(f"scaling: needs {max(args.gpus)} CUDA GPUs and {visible} are visible here", file=sys.stderr)
        return 2
    from evo.experiment.config import load_experiment
    from tests.gpu import write_json

    experiment = load_experiment(args.experiment)
    problem = experiment.problems[args.problem - 1]
    gpu = torch.cuda.get_device_name(0)
    text = Path(args.experiment).read_text()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="evo-scaling-") as tmp:
        for n in args.gpus:
            yaml_text = scaled_experiment(text, problem.key, n, args.minutes * 60, f"scaling-{n}gpu")
            store_path, cpu = _run(yaml_text, Path(tmp), n)
            results[str(n)] = dict(count_rate(store_path, problem.key), machine_cpu_busy=cpu,
                                   cpus=os.cpu_count())
            print(f"[scaling] {n} GPU(s): {results[str(n)]}", flush=True)
    base = results[str(min(args.gpus))]["per_minute"] or float("nan")
    speedup = {n: round((r["per_minute"] or float("nan")) / base, 3) for n, r in results.items()}
    doc = {"gpu": gpu, "date": _dt.date.today().isoformat(), "experiment": Path(args.experiment).name,
           "problem": problem.key, "minutes_per_run": args.minutes, "runs": results, "speedup": speedup,
           "goal": {"gpus": 2, "speedup": GOAL},
           "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__},
           "how": "evo run per GPU count, the problem alone, budget = wall time only, fresh Triton cache; rate = "
                  "evaluations stored / the search's clock (wall_s:<problem>, Ray start excluded)"}
    name = f"scaling-{gpu_slug(gpu)}.json"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(doc, indent=1) + "\n")
    write_json(name, doc)
    print(f"[scaling] {gpu}: " + ", ".join(f"{n} GPU(s) {r['per_minute']}/min" for n, r in results.items())
          + f"; speedup {speedup} (goal {GOAL}x on 2) -> {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
