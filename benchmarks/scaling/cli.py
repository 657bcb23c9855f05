"""`python -m benchmarks.scaling`: how a search scales with GPUs, measured (a GPU script).

    python -m benchmarks.scaling [--experiment experiments/llm_gemm.yaml [--problems all | 1 4 7] --minutes 2]
                                 [--zoo experiments/models/llama-3.2-1b.json --tokens 1 --context 2048 --zoo-wall-s 6]
                                 [--gpus 1 2 4] [--surrogate on|off] [--evaluations N] [--deadline-s S]
                                 [--keep DIR] [--out reports/gpu] [--tag T] [--code TEXT]
    python -m benchmarks.scaling --analyse DIR [--out reports/gpu] [--tag T]

Each workload (the experiment's problems in turn through `evo run`, its budget a wall time shared by them; the
model's whole zoo through `evo zoo MODEL --run`, each problem `--zoo-wall-s` seconds) runs once per GPU count, one
run at a time. Per count: evaluations and correct ones per minute of the search's clock, each GPU worker's busy
share, the compile pool's queue (mean, largest, and over time), the driver's CPU share, and per problem the time
at which the best correct kernel came within 99% of the fewest-GPU run's final elite. The document names the GPU
and the counts: OUT/scaling-<gpu>[-<tag>].json (and $EVO_OUT, where the device tool collects it); a short table
is printed last. `--keep DIR` keeps each run's stores (without kernel texts) and measures, from which `--analyse
DIR` writes the document again without a GPU.

Without the experiment or zoo (neither given: experiments/llm_gemm.yaml), with bad arguments, or with fewer
CUDA GPUs than asked for, it says so in one line and exits with status 2 before any run.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import sys
import tempfile
from pathlib import Path

from benchmarks.scaling.analyse import analyse
from benchmarks.scaling.report import table_lines, write_doc
from benchmarks.scaling.runner import ROOT
from benchmarks.scaling.session import run_session
from benchmarks.scaling.workloads import Workload, experiment_workload, zoo_workload

__all__ = ["build_parser", "check_args", "main"]

DEFAULT_EXPERIMENT = ROOT / "experiments" / "llm_gemm.yaml"
COUNTS = (1, 2, 4)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__.split("\n\n")[0])
    p.add_argument("--experiment", default=None, help="an experiment whose problems are searched in turn "
                   "(default experiments/llm_gemm.yaml when no --zoo is given)")
    p.add_argument("--problems", nargs="+", default=None, metavar="POS",
                   help="the experiment's problems: 'all' (default) or 1-based positions")
    p.add_argument("--minutes", type=float, default=2.0, help="the experiment's wall time per run, shared evenly "
                   "by its problems (default 2)")
    p.add_argument("--evaluations", type=int, default=None, metavar="N",
                   help="also stop each problem at N evaluations (default: only the wall time)")
    p.add_argument("--surrogate", choices=("on", "off"), default="on",
                   help="the experiment with the surrogate-guided emitter in (default) or out")
    p.add_argument("--zoo", metavar="MODEL", default=None, help="a model config: its zoo, as `evo zoo MODEL --run`")
    p.add_argument("--tokens", default="1", help="with --zoo: token counts (default 1: one decode step)")
    p.add_argument("--context", type=int, default=2048, help="with --zoo: tokens in the KV cache (default 2048)")
    p.add_argument("--zoo-wall-s", type=float, default=6.0, help="with --zoo: seconds per problem (default 6)")
    p.add_argument("--gpus", type=int, nargs="+", default=None,
                   help="GPU counts (default: 1, 2 and 4, as many as are visible)")
    p.add_argument("--deadline-s", type=float, default=None,
                   help="stop the session after this many seconds: a run still going is stopped, later ones skipped")
    p.add_argument("--keep", default=None, metavar="DIR", help="keep each run's stores and measures here")
    p.add_argument("--analyse", default=None, metavar="DIR", help="only write the document from a kept folder")
    p.add_argument("--out", default=str(ROOT / "reports" / "gpu"), help="folder of the JSON (default reports/gpu)")
    p.add_argument("--tag", default=None, help="appended to the JSON's name")
    p.add_argument("--code", default=None, help="what code was measured (e.g. the commit), into the document")
    return p


def check_args(args: argparse.Namespace) -> str | None:
    """A one-line complaint about the arguments that needs neither a GPU nor a plan, else None."""
    if not 0 < args.minutes <= 60:
        return f"--minutes {args.minutes:g}: expected more than 0 and at most 60"
    if not 0 < args.zoo_wall_s <= 3600:
        return f"--zoo-wall-s {args.zoo_wall_s:g}: expected more than 0 and at most 3600"
    if args.gpus is not None and (any(n < 1 for n in args.gpus) or len(set(args.gpus)) != len(args.gpus)
                                  or len(args.gpus) < 2):
        return f"--gpus {' '.join(map(str, args.gpus))}: expected at least two distinct counts of at least 1"
    if args.evaluations is not None and args.evaluations < 1:
        return f"--evaluations {args.evaluations}: expected at least 1 per problem"
    if args.deadline_s is not None and args.deadline_s <= 0:
        return f"--deadline-s {args.deadline_s:g}: expected more than 0"
    if args.context < 0:
        return f"--context {args.context}: expected 0 or more"
    if args.analyse is not None and not Path(args.analyse).is_dir():
        return f"--analyse {args.analyse}: no such folder"
    if args.problems is not None and args.experiment is None and args.zoo is not None:
        return "--problems chooses among --experiment's problems; a zoo is searched whole"
    if args.keep is not None and args.analyse is None and Path(args.keep).exists() and any(Path(args.keep).iterdir()):
        return f"--keep {args.keep}: already holds files (an earlier session's?); name a new or empty folder"
    return None


def plan(args: argparse.Namespace, plan_dir: Path) -> list[Workload]:
    """The workloads the arguments name, planned (ValueError, one line, for one that cannot be)."""
    out = []
    if args.experiment is not None or args.zoo is None:
        path = Path(args.experiment) if args.experiment is not None else DEFAULT_EXPERIMENT
        out.append(experiment_workload(path, args.problems, args.minutes * 60, args.surrogate == "on",
                                       args.evaluations))
    if args.zoo is not None:
        out.append(zoo_workload(args.zoo, args.tokens, args.context, args.zoo_wall_s, args.evaluations, plan_dir))
    return out


def _gpus() -> tuple[int, str, dict[str, str]]:
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    name = torch.cuda.get_device_name(0) if visible else ""
    return visible, name, {"torch": torch.__version__, "triton": __import__("triton").__version__}


def _finish(doc: dict, args: argparse.Namespace) -> int:
    path = write_doc(doc, Path(args.out), args.tag)
    if os.environ.get("EVO_OUT"):
        write_doc(doc, Path(os.environ["EVO_OUT"]), args.tag)
    print("\n".join(table_lines(doc)))
    print(f"[scaling] wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    complaint = check_args(args)
    if complaint:
        print(f"scaling: {complaint}", file=sys.stderr)
        return 2
    if args.analyse is not None:
        try:
            doc = analyse(Path(args.analyse))
        except ValueError as e:
            print(f"scaling: {e}", file=sys.stderr)
            return 2
        return _finish(doc, args)
    with tempfile.TemporaryDirectory(prefix="evo-scaling-") as tmp:
        work = Path(tmp)
        try:
            workloads = plan(args, work / "plan")
        except ValueError as e:
            print(f"scaling: {e}", file=sys.stderr)
            return 2
        visible, gpu, versions = _gpus()
        counts = args.gpus or [n for n in COUNTS if n <= visible]
        if len(counts) < 2 or visible < max(counts):
            need = max(counts) if args.gpus else 2
            print(f"scaling: needs {need} CUDA GPUs and {visible} are visible here", file=sys.stderr)
            return 2
        header = {"gpu": gpu, "gpus_on_machine": visible, "cpus": os.cpu_count(), "versions": versions,
                  "date": _dt.date.today().isoformat(), "code": args.code}
        keep = Path(args.keep) if args.keep else None
        root = run_session(workloads, counts, work / "runs", keep, work / "caches", header, args.deadline_s)
        return _finish(analyse(root), args)
