"""How evaluation throughput scales with GPUs (a GPU script): candidates evaluated per minute for one experiment
on 1 GPU, then on 2 (or the counts given), each for the same fixed wall time, through the normal `evo run` path.

    python -m tests.gpu.scaling [--experiment experiments/quick_gemm.yaml | --zoo MODEL [--operator gemm]]
                                [--problem 1 | --problems all | --problems 1 4 7] [--evaluations N]
                                [--surrogate on|off] [--minutes 3] [--gpus 1 2] [--out reports/gpu] [--tag T]

For each GPU count the experiment's chosen problem is searched alone (or the chosen problems one after the other,
as `evo run` searches them: `--problems`), with `executor.gpus` set to the count and the budget replaced by the
wall time, shared evenly by the problems (no evaluation or stagnation limit, unless `--evaluations` sets one per
problem), by `evo run` in a subprocess, with a Triton cache of its own (so that no run compiles faster on what an
earlier one cached). `--zoo MODEL` takes the experiment `evo zoo MODEL` writes for `--operator` (e.g.
experiments/models/llama-3-8b.json: every GEMM shape of its forward pass at 1-2048 tokens); `--surrogate` puts
the surrogate-guided emitter in (on, the default emitters have it) or leaves it out.

Per GPU count: the evaluations stored per minute of the search's own clock (the problems' `wall_s:<problem>` in
the store, which excludes starting Ray) and the correct, timed ones; each GPU worker's busy share of that clock;
the compile pool's queue (time-weighted mean and largest count of candidates waiting for a compile slot,
compiling, compiled and waiting for a GPU, at the GPUs: `queue:<problem>`); the search process's CPU share
(`cpu_s:<problem>`: under 1 core, or the driver is what the GPUs wait for) and the `evo run` process tree's. The
result, with the GPU named, goes to OUT/scaling-<gpu>[-<tag>].json (and to $EVO_OUT, where the device tool
collects it); a run of several problems is tagged `<experiment>-<n>problems` unless `--tag` names it. Goals: at
least 1.95x the one-GPU rate on two GPUs, GPU workers busy at least 90% of the search's clock.

Without CUDA, or with fewer GPUs than asked for, it says so in one line and exits with status 2, before any work.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

__all__ = ["build_parser", "scaled_experiment", "count_rate", "gpu_slug", "main", "chosen_problems",
           "experiment_source"]

GOAL = 1.95
BUSY_GOAL = 0.9
ROOT = Path(__file__).resolve().parents[2]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tests.gpu.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", default=str(ROOT / "experiments" / "quick_gemm.yaml"), help="experiment file")
    p.add_argument("--zoo", metavar="MODEL", default=None,
                   help="instead of --experiment: the experiment `evo zoo MODEL` writes for --operator")
    p.add_argument("--operator", default="gemm", help="with --zoo: the operator's experiment (default gemm)")
    p.add_argument("--tokens", default="1,16,128,2048", help="with --zoo: token counts (default 1,16,128,2048)")
    p.add_argument("--problem", type=int, default=1, help="1-based position of the problem to search (default 1)")
    p.add_argument("--problems", nargs="+", default=None, metavar="POS",
                   help="several problems in one run, one after the other: 'all' or 1-based positions")
    p.add_argument("--evaluations", type=int, default=None, metavar="N",
                   help="also stop each problem at N evaluations (default: only the wall time)")
    p.add_argument("--surrogate", choices=("on", "off"), default="on",
                   help="the surrogate-guided emitter in (default) or out")
    p.add_argument("--tag", default=None, help="appended to the JSON's name (default: none for one problem)")
    p.add_argument("--minutes", type=float, default=3.0, help="wall time of each run (default 3)")
    p.add_argument("--gpus", type=int, nargs="+", default=[1, 2], help="GPU counts to compare (default 1 2)")
    p.add_argument("--out", default=str(ROOT / "reports" / "gpu"), help="folder of the JSON (default reports/gpu)")
    return p


def experiment_source(args: argparse.Namespace) -> tuple[str, str]:
    """(the experiment's YAML text, its name for the output): --experiment's file, or --zoo's experiment for
    --operator. ValueError (one line) when the model or the operator is not there."""
    if args.zoo is None:
        from evo.experiment.config import load_experiment

        load_experiment(args.experiment)  # a file that is missing or invalid: its one-line ConfigError
        return Path(args.experiment).read_text(), Path(args.experiment).stem
    from evo.surface.zoo_command import parse_tokens
    from evo.zoo import ModelError, experiments_for, load_model
    from evo.zoo.problems import run_name

    try:
        spec = load_model(args.zoo)
    except ModelError as e:
        raise ValueError(str(e)) from None
    texts = experiments_for(spec, parse_tokens(args.tokens), "bf16")
    if args.operator not in texts:
        raise ValueError(f"--operator {args.operator!r}: {spec.name}'s experiments are for {', '.join(texts)}")
    return texts[args.operator], run_name(spec, args.operator)


def chosen_problems(args: argparse.Namespace, count: int) -> list[int]:
    """The 0-based positions --problems (else --problem) chooses among `count`; ValueError (one line) if bad."""
    if args.problems is None:
        if not 1 <= args.problem <= count:
            raise ValueError(f"--problem {args.problem}: the experiment has problems 1-{count}")
        return [args.problem - 1]
    if args.problems == ["all"]:
        return list(range(count))
    if not all(p.isdigit() and 1 <= int(p) <= count for p in args.problems) or \
            len(set(args.problems)) != len(args.problems):
        raise ValueError(f"--problems {' '.join(args.problems)}: expected 'all' or distinct positions in 1-{count}")
    return [int(p) - 1 for p in args.problems]


def check_args(args: argparse.Namespace) -> str | None:
    """A one-line complaint about the arguments, else None (no GPU needed)."""
    from evo.experiment.config import ConfigError, parse_experiment

    if not 0 < args.minutes <= 60:
        return f"--minutes {args.minutes:g}: expected more than 0 and at most 60"
    if any(n < 1 for n in args.gpus) or len(set(args.gpus)) != len(args.gpus):
        return f"--gpus {args.gpus}: expected distinct counts of at least 1"
    if args.evaluations is not None and args.evaluations < 1:
        return f"--evaluations {args.evaluations}: expected at least 1 per problem"
    try:
        text, _ = experiment_source(args)
        experiment = parse_experiment(text, args.zoo or args.experiment)
        chosen_problems(args, len(experiment.problems))
    except (ConfigError, ValueError) as e:
        return str(e)
    if experiment.executor.kind == "smoke":
        return f"{args.zoo or args.experiment}: a smoke experiment times nothing; choose one that runs on GPUs"
    return None


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


def count_rate(store_path: Path, problem_keys: str | Sequence[str]) -> dict[str, Any]:
    """Evaluations and correct ones per minute of the search's clock for the problem (or problems, their clocks
    added up), and where the time went: how busy each GPU worker was, the mean seconds of compiling and of each
    measuring phase, the compile pool's queue, and the search process's CPU share."""
    from evo.evaluate.occupancy import merge_summaries
    from evo.store import Store

    keys = [problem_keys] if isinstance(problem_keys, str) else list(problem_keys)
    with Store(store_path, readonly=True) as store:
        rows = [r for k in keys for r in store.evaluations(k)]
        clock = sum(float(store.meta(f"wall_s:{k}", 0.0)) for k in keys)
        cpu = [store.meta(f"cpu_s:{k}") for k in keys]
        queue = merge_summaries([store.meta(f"queue:{k}") for k in keys])
    ok = sum(r.status == "ok" for r in rows)
    minutes = clock / 60 if clock else float("nan")
    busy: dict[str, float] = {}
    for r in rows:
        if r.worker:
            busy[r.worker] = busy.get(r.worker, 0.0) + max(0.0, r.finished_at - r.started_at)

    def mean(values: list[float]) -> float | None:
        return round(sum(values) / len(values), 4) if values else None

    phases = [r.resources.get("eval", {}) for r in rows if isinstance(r.resources.get("eval"), dict)]
    known_cpu = [float(c) for c in cpu if isinstance(c, (int, float))]
    return {"evaluations": len(rows), "ok": ok, "search_s": round(clock, 2),
            "per_minute": round(len(rows) / minutes, 1) if clock else None,
            "ok_per_minute": round(ok / minutes, 1) if clock else None,
            "workers": sorted(busy),
            "worker_busy_share": {w: round(b / clock, 3) for w, b in sorted(busy.items())} if clock else {},
            "mean_s": {"compile": mean([r.compile_s for r in rows if r.compile_s is not None]),
                       **{k: mean([p[k] for p in phases if isinstance(p.get(k), (int, float))])
                          for k in ("load_s", "check_s", "time_s")}},
            "compile_queue": queue,
            # cores the search's own process used while searching (recorded since the search saves cpu_s)
            "driver_cpu_share": round(sum(known_cpu) / clock, 3) if clock and len(known_cpu) == len(keys) else None}


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of this machine since boot (Linux /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200' (the name in the file's name)."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _run(yaml_text: str, work: Path, n: int) -> tuple[Path, dict[str, Any]]:
    """`evo run` of the experiment on `n` GPUs; its store, and the CPU it took: the machine's busy share and the
    cores the `evo run` process tree used (itself and the processes it reaped, Ray's among them)."""
    exp = work / f"scaling-{n}gpu.yaml"
    exp.write_text(yaml_text)
    run = work / f"run-{n}gpu"
    env = dict(os.environ, TRITON_CACHE_DIR=str(work / f"triton-cache-{n}gpu"))
    t0, ticks0 = time.monotonic(), _cpu_ticks()
    tree0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "evo.surface.cli", "run", str(exp), "--out", str(run)], env=env,
                          cwd=ROOT, text=True, capture_output=True)
    print(done.stdout[-3000:], flush=True)
    if done.returncode != 0:
        raise SystemExit(f"evo run on {n} GPU(s) failed with status {done.returncode}: {done.stderr[-2000:]}")
    tree1, took = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic() - t0
    busy, total = (b - a for a, b in zip(ticks0, _cpu_ticks(), strict=True))
    cpu = {"machine_cpu_busy": round(busy / total, 3) if total else None, "evo_run_s": round(took, 1),
           "evo_run_tree_cores": round((tree1.ru_utime + tree1.ru_stime - tree0.ru_utime - tree0.ru_stime) / took, 3)}
    print(f"[scaling] {n} GPU(s): evo run took {took:.0f} s, CPU {cpu}", flush=True)
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
    from evo.experiment.config import parse_experiment
    from tests.gpu import write_json

    text, label = experiment_source(args)
    experiment = parse_experiment(text, args.zoo or args.experiment)
    keys = [experiment.problems[i].key for i in chosen_problems(args, len(experiment.problems))]
    surrogate = args.surrogate == "on"
    gpu = torch.cuda.get_device_name(0)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="evo-scaling-") as tmp:
        for n in args.gpus:
            yaml_text = scaled_experiment(text, keys, n, args.minutes * 60 / len(keys), f"scaling-{n}gpu",
                                          surrogate, args.evaluations)
            store_path, cpu = _run(yaml_text, Path(tmp), n)
            results[str(n)] = dict(count_rate(store_path, keys), **cpu, cpus=os.cpu_count())
            print(f"[scaling] {n} GPU(s): {results[str(n)]}", flush=True)
    base = results[str(min(args.gpus))]["per_minute"] or float("nan")
    speedup = {n: round((r["per_minute"] or float("nan")) / base, 3) for n, r in results.items()}
    doc = {"gpu": gpu, "date": _dt.date.today().isoformat(),
           "experiment": f"evo zoo {args.zoo} --tokens {args.tokens}: {args.operator}" if args.zoo
           else Path(args.experiment).name,
           **({"problem": keys[0]} if len(keys) == 1 else {"problems": keys}),
           "surrogate": surrogate, "evaluations_per_problem": args.evaluations,
           "minutes_per_run": args.minutes, "runs": results, "speedup": speedup,
           "goal": {"gpus": 2, "speedup": GOAL, "worker_busy_share": BUSY_GOAL},
           "versions": {"torch": torch.__version__, "triton": __import__("triton").__version__},
           "how": "evo run per GPU count, the chosen problems in turn, budget = wall time (shared evenly) only, fresh "
                  "Triton cache; rate = evaluations stored / the search's clock (the problems' wall_s, Ray start "
                  "excluded); driver_cpu_share = the search process's CPU seconds (cpu_s) / that clock"}
    tag = args.tag if args.tag is not None else ("" if len(keys) == 1 else f"{label}-{len(keys)}problems")
    name = f"scaling-{gpu_slug(gpu)}{'-' + gpu_slug(tag) if tag else ''}.json"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(json.dumps(doc, indent=1) + "\n")
    write_json(name, doc)
    print(f"[scaling] {gpu}: " + ", ".join(f"{n} GPU(s) {r['per_minute']}/min" for n, r in results.items())
          + f"; speedup {speedup} (goal {GOAL}x on 2) -> {out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
