"""Benchmarking problems concurrently on several GPUs of one machine, one child process per GPU and problem.

Each child is `python -m evo.bench.command ... --problems KEY --partial FILE` with CUDA_VISIBLE_DEVICES naming one
GPU, so a problem's contenders are all checked and timed in one process on one GPU. The parent hands out
problems as GPUs free up, keeps each child's output in a log, kills a child that overruns its time limit,
and merges the children's JSON into one document (evo.bench.results.merge_reports).

The search comes first, either as one search over every GPU in this process (the experiment's executor,
e.g. Ray with one actor per GPU), or, with `--search-per-gpu`, inside each child on its own GPU.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evo.bench.results import load_report, merge_reports, print_summary, write_report
from evo.experiment.spec import Experiment
from evo.problem import Problem

__all__ = ["gpu_slots", "child_command", "run_parallel", "problem_slug"]


def gpu_slots(limit: int | None = None, env: dict[str, str] | None = None) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each GPU a child may use (at most `limit`)."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        slots = [v.strip() for v in visible.split(",") if v.strip()]
    else:
        try:
            import torch

            slots = [str(i) for i in range(torch.cuda.device_count())]
        except Exception:
            slots = []
    if limit is not None:
        if limit < 1:
            raise ValueError(f"--gpus must be at least 1, got {limit}")
        slots = slots[:limit]
    return slots


def problem_slug(problem: Problem) -> str:
    return problem.key.replace(":", "-")


def child_command(args: argparse.Namespace, problem: Problem, partial: Path, run: Path | None,
                  search_dir: Path | None) -> list[str]:
    """The command line of the child that benchmarks `problem` (forwarding the parent's settings)."""
    cmd = [sys.executable, "-m", "evo.bench.command", str(args.experiment), "--problems", problem.key,
           "--partial", str(partial), "--reps", str(args.reps), "--finalists", str(args.finalists),
           "--seed", str(args.seed)]
    if run is not None:
        cmd += ["--run", str(run)]
    elif search_dir is not None:
        cmd += ["--search-dir", str(search_dir), "--search-per-gpu"]
    if args.contenders:
        cmd += ["--contenders", args.contenders]
    for flag, value in (("--wall-s", getattr(args, "wall_s", None)),
                        ("--evaluations", getattr(args, "evaluations", None))):
        if value is not None:
            cmd += [flag, str(value)]
    return cmd


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _stop(proc: subprocess.Popen) -> None:
    """End a child we started, and the processes it started (it leads its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_parallel(args: argparse.Namespace, experiment: Experiment, problems: list[Problem], run_dir: Path,
                 slots: list[str], search: Callable[[Experiment, list[Problem], Path], None]) -> int:
    """Benchmark `problems` over the GPUs in `slots`; writes the merged document under `args.out`. `search`
    searches them all first, over every GPU, unless the arguments say otherwise (evo.bench.command's)."""
    work = run_dir / "bench"
    work.mkdir(parents=True, exist_ok=True)
    run: Path | None = Path(args.run) if args.run else None
    failures: list[dict[str, Any]] = []
    if run is None and not args.search_per_gpu:
        print(f"[bench] searching {len(problems)} problems over every GPU into {run_dir}", flush=True)
        try:
            search(experiment, problems, run_dir)
        except Exception as e:
            failures.append({"key": "*", "reason": f"search failed: {type(e).__name__}: {e}"})
        run = run_dir
    queue = list(problems)
    running: dict[str, tuple[subprocess.Popen, Problem, float, Path, Path]] = {}
    partials: list[Path] = []
    free = list(slots)
    while queue or running:
        while queue and free:
            problem, slot = queue.pop(0), free.pop(0)
            slug = problem_slug(problem)
            partial, log = work / f"{slug}.json", work / f"{slug}.log"
            search_dir = None if run is not None else run_dir / slug
            cmd = child_command(args, problem, partial, run, search_dir)
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=slot)
            with open(log, "w") as fh:
                proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
            running[slot] = (proc, problem, time.time(), partial, log)
            print(f"[bench] GPU {slot}: {problem.key} (log {log})", flush=True)
        time.sleep(0.5)
        for slot, (proc, problem, started, partial, log) in list(running.items()):
            elapsed = time.time() - started
            if proc.poll() is None and elapsed > args.timeout_s:
                _stop(proc)
                failures.append({"key": problem.key, "reason": f"timed out after {args.timeout_s:.0f} s",
                                 "log": str(log)})
            elif proc.poll() is None:
                continue
            elif partial.exists():
                partials.append(partial)
            else:
                failures.append({"key": problem.key, "reason": f"child exited {proc.returncode}", "log": str(log)})
                print(_tail(log), flush=True)
            print(f"[bench] GPU {slot}: {problem.key} finished in {elapsed:.0f} s", flush=True)
            del running[slot]
            free.append(slot)
    if not partials:
        print("[bench] no problem was measured: " + "; ".join(f"{f['key']}: {f['reason']}" for f in failures),
              file=sys.stderr)
        return 1
    order = {p.key: i for i, p in enumerate(problems)}
    docs = [load_report(p) for p in partials]
    doc = merge_reports(docs, names=[str(p) for p in partials])
    doc["problems"].sort(key=lambda p: order.get(p["key"], len(order)))
    doc["failures"] = doc.get("failures", []) + failures
    doc["run_dir"] = str(run_dir)
    print_summary(doc, write_report(doc, args.out))
    return 0 if len(doc["problems"]) == len(problems) else 1
