"""The `evo` command: run an experiment, summarise a run, export elite kernels, write the HTML report.

Every bad input (a missing or invalid file, a missing run directory, a shape that does not parse, a shape that
was not measured) ends with one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sqlite3
import sys
from pathlib import Path
from typing import Any, NoReturn

from evo.experiment.oneline import one_line
from evo.store.atomic_file import write_atomic
from evo.surface.package_origin import ShadowedPackage, evo_version
from evo.surface.safe_stream import DroppingStream, reopen_closed_std_fds, say
from evo.surface.smoke_label import smoke_score, smoke_value

__all__ = ["main", "UsageError"]

SMOKE_NOTE = ("SMOKE RUN: kernels are checked in the CPU Triton interpreter and their fitness is a stand-in: it is "
              "NOT a timing and says nothing about GPU speed. This mode is for trying the tool.")


class UsageError(ValueError):
    """A bad command line or input; reported in one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line instead of argparse's usage block
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def _open_run(path: str) -> tuple[Any, Any, str, Any]:
    """(RunDir, Store, experiment text, Experiment or None) of an existing run directory."""
    from evo.experiment.config import ConfigError, load_experiment
    from evo.experiment.rundir import RunDir
    from evo.store.sqlite import Store

    rd = RunDir(Path(path))
    if not rd.path.is_dir():
        raise UsageError(f"{path}: no such run directory")
    if not rd.exists():
        raise UsageError(f"{path}: not a run directory (no {rd.store.name} in it)")
    text, experiment = "", None
    if rd.experiment.exists():
        try:
            # bounded: a huge or device copy is refused, not read; the run's own copy was checked for feasible
            # genomes when the run started
            experiment = load_experiment(rd.experiment, check_feasible=False)
            text = experiment.source
        except ConfigError as e:  # the copy no longer validates (e.g. an operator changed): summarise anyway
            print(f"evo: warning: {e}; using default descriptors", file=sys.stderr)
            text = _bounded_text(rd.experiment)
    return rd, Store(rd.store, readonly=True), text, experiment


def _bounded_text(path: Path) -> str:
    """The run's experiment copy for the report, or '' when it is too large or unreadable (the report says so)."""
    from evo.experiment.bounded_read import read_text_bounded
    from evo.experiment.limits import MAX_TEXT_BYTES

    try:
        return read_text_bounded(path, MAX_TEXT_BYTES)
    except (OSError, ValueError):
        return ""


def _warn_damaged(store: Any) -> None:
    """One line for the rows the store skipped as damaged (evo.store.row_check); the command used the rest."""
    if store.skipped:
        print(f"evo: warning: {one_line(store.skipped.line(store.path))}", file=sys.stderr)


def _is_smoke(store: Any, experiment: Any) -> bool:
    from evo.surface.export import is_smoke

    if experiment is not None and experiment.executor.kind == "smoke":
        return True
    return any(is_smoke(ev) for ev in store.iter(status="ok"))


# -- evo run ------------------------------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace) -> int:
    from evo.experiment.config import load_experiment
    from evo.experiment.rundir import RunDir
    from evo.surface.progress import Progress

    if args.allow_changes and not args.resume:
        raise UsageError("--allow-changes goes with --resume (a new run has nothing to change)")
    experiment = load_experiment(args.experiment)
    rd = RunDir(Path(args.out)) if args.out else RunDir.of(experiment.output, experiment.name)
    _check_before_workers(rd, experiment, args)
    from evo.evaluate.executor import WorkersLost
    from evo.search.run import StartupError, run_experiment  # imported late: it brings in the executor machinery
    from evo.surface.stop_signals import StopSignals

    smoke = experiment.executor.kind == "smoke"
    out = DroppingStream(sys.stdout)  # a closed or broken stdout drops the run's progress, never the run
    print(f"evo {evo_version()}: experiment {experiment.name} ({experiment.operator}, {len(experiment.problems)} "
          f"problems, executor {experiment.executor.kind}) -> {rd.path}{' (resuming)' if args.resume else ''}",
          file=out)
    if smoke:
        print(SMOKE_NOTE, file=out)
    progress = Progress(experiment.problems, budget=experiment.budget.evaluations, smoke=smoke, stream=out,
                        wall_s=experiment.budget.wall_s)
    resume_hint = f"evo run {_q(args.experiment)} --out {_q(rd.path)} --resume"
    print(f"starting {experiment.executor.kind} workers and compiling the first candidates ...", file=out)
    out.flush()

    def on_event(event: Any) -> None:
        stops.reassert()  # Ray's init, in the executor's start, took SIGTERM over
        progress(event)

    with StopSignals() as stops:
        try:
            summary = run_experiment(experiment, rd.path, resume=args.resume, on_event=on_event,
                                     **({"allow_changes": True} if args.allow_changes else {}))
        except StartupError as e:
            raise UsageError(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        except KeyboardInterrupt:
            progress.close()
            if not progress.started:
                say(f"evo: interrupted before the search started: nothing was evaluated, {rd.path} is as it was")
            else:
                say(f"evo: interrupted: every completed evaluation is stored; continue with {resume_hint}")
            return stops.exit_status()
        except WorkersLost as e:
            progress.close()
            say(f"evo: error: {e}; continue with {resume_hint}")
            return 1
        except (OSError, sqlite3.OperationalError) as e:
            if not _disk_full(e):
                raise
            progress.close()
            say(f"evo: error: no space left on the disk of {rd.path}: every evaluation stored before is kept; free "
                f"some space, then continue with {resume_hint}")
            return 1
        finally:
            progress.close()
    try:
        _cmd_status(argparse.Namespace(run=str(rd.path)), after_run=not summary.interrupted)
    except (OSError, ValueError):  # stdout went away: the summary is in the store, `evo status` shows it again
        pass
    if summary.interrupted:
        say(f"interrupted: every completed evaluation is stored; continue with {resume_hint}")
        return stops.exit_status()
    return 0


def _check_before_workers(rd: Any, experiment: Any, args: argparse.Namespace) -> None:
    """Every refusal that needs no worker, made before the executor machinery (torch, triton, Ray) is imported:
    the run directory (a file, a symbolic-link loop), a results database that is the run's own store, and on
    --resume a store that cannot be resumed or an experiment that changed in what decides results (e.g. its seed).
    run_experiment checks the same again."""
    from evo.experiment.runlock import check_free, check_run_path, check_writable
    from evo.store.resumable import check_resumable, resume_changes
    from evo.store.shared import default_path, refuse_own_store
    from evo.store.sqlite import StoreError

    check_run_path(rd.path)
    check_free(rd.path)  # a live run's directory: neither --resume nor a new run can have it until that run ends
    if not args.resume:
        check_writable(rd.path)
    if experiment.memory.enabled:
        refuse_own_store(default_path(experiment.memory.db, rd.path), rd.store, UsageError)
    if rd.exists() and not args.resume:
        raise UsageError(f"{rd.path} already holds a run: pass --resume to continue it, or --out DIR for a new one")
    if args.resume and not rd.exists():
        raise UsageError(f"{rd.path}: nothing to resume (no {rd.store.name} in it)")
    if args.resume:
        check_resumable(rd.store, StoreError)
        resume_changes(rd.store, experiment, args.allow_changes, UsageError)


def _q(path: str | Path) -> str:
    """A path as the shell reads it back (hints are meant to be pasted)."""
    return shlex.quote(str(path))


def _disk_full(e: BaseException) -> bool:
    import errno

    if isinstance(e, sqlite3.OperationalError):
        return "full" in str(e)
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


# -- evo status ---------------------------------------------------------------------------------------
def _cmd_status(args: argparse.Namespace, after_run: bool = False) -> int:
    from evo.surface.status import format_status, run_status

    rd, store, _, experiment = _open_run(args.run)
    with store:
        rows = run_status(store, experiment)
        smoke = _is_smoke(store, experiment)
    _warn_damaged(store)
    name = experiment.name if experiment else rd.path.name
    print(f"run {rd.path} (experiment {name}): {sum(r.evaluations for r in rows)} evaluations")
    if smoke:
        print(SMOKE_NOTE)
    print(format_status(rows, smoke))
    if after_run:
        print(f"next: evo report {_q(rd.path)}   |   evo export {_q(rd.path)} --shape SHAPE")
    return 0


# -- evo export ---------------------------------------------------------------------------------------
def _cmd_export(args: argparse.Namespace) -> int:
    from evo.experiment.config import parse_shape
    from evo.problem import DTYPES
    from evo.surface.export import export_all, export_one, is_smoke, rerendered
    from evo.surface.winning_config import config_text

    if args.all == bool(args.shape):
        raise UsageError("give either --shape SHAPE or --all")
    if args.config and args.output:
        raise UsageError("--config prints the winning configuration and writes no module: leave out -o")
    if args.dtype is not None and args.dtype not in DTYPES:
        raise UsageError(f"--dtype {args.dtype!r}: expected one of {', '.join(DTYPES)}")
    sizes = None
    if args.shape:
        try:
            sizes = parse_shape(args.shape)
        except ValueError as e:
            raise UsageError(f"--shape: {e}") from None
    rd, store, _, experiment = _open_run(args.run)
    with store:
        if args.all:
            text, found = export_all(store, experiment)
            note = rerendered(store, found)
            default = rd.path / f"{rd.path.name}_elites.py"
            keys = ", ".join(e.problem.key for e in found[:12]) + (f" and {len(found) - 12} more" if found[12:] else "")
            what = f"{len(found)} elites ({keys})"
        else:
            text, elite = export_one(store, sizes, args.dtype, experiment)
            note = rerendered(store, [elite])
            p = elite.problem
            default = rd.path / f"{p.operator}_{p.shape_text}_{p.dtype}.py"
            ev = elite.evaluation
            ratio = f", {ev.ratio:.3f}x {ev.baseline} on the {ev.objective} clock" if ev.ratio else ""
            call = f", {ev.call_ms:.4g} ms per call" if ev.call_ms else ""
            if is_smoke(ev, store.all_meta()):
                import operators

                measured = f"smoke score {smoke_score(smoke_value(operators.get(p.operator), p, ev))}"
            else:
                measured = f"{ev.median_ms:.4g} ms GPU time{call}{ratio} on {ev.gpu or '?'}"
            what = f"elite of {p.key} ({measured})"
        meta = store.all_meta()  # (the elites written tell whether they were timed: no other row is read)
        smoke = any(is_smoke(e.evaluation, meta) for e in (found if args.all else [elite]))
        config = config_text(found if args.all else [elite], store.all_meta()) if args.config else None
    _warn_damaged(store)
    if config is not None:  # --config: the winning configuration for the user's own kernel, no module written
        print(config)
        return 0
    out = Path(args.output or default)
    try:
        write_atomic(out, text)  # a full disk or a signal leaves the old file or none, never half a module
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
    print(f"wrote {out}: {what}")
    if note:
        print(note)
    if smoke:
        print("note: a smoke run's kernels were checked in the CPU interpreter, never timed on a GPU")
    print(f"check it: python {_q(out)}")
    return 0


# -- evo report ---------------------------------------------------------------------------------------
def _cmd_report(args: argparse.Namespace) -> int:
    from evo.surface.report import ReportInput, build_report

    rd, store, text, experiment = _open_run(args.run)
    name = experiment.name if experiment else rd.path.name
    with store:
        page = build_report(ReportInput(store, name, experiment, text), args.x, args.y)
    _warn_damaged(store)
    out = Path(args.output) if args.output else rd.path / "report.html"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, page)
    except OSError as e:
        raise UsageError(f"cannot write {out}: {e.strerror or e}") from None
    print(f"wrote {out} ({len(page) / 1e6:.1f} MB, self-contained: open it in a browser, no network needed)")
    return 0


# -- evo genes ----------------------------------------------------------------------------------------
def _cmd_genes(args: argparse.Namespace) -> int:
    import operators

    if not args.operator:
        print("operators: " + ", ".join(operators.names()) + "   (evo genes OPERATOR lists one's genes; some take "
              "options after +, e.g. gemm+bias+gelu)")
        print(_budget_line())
        return 0
    try:
        op = operators.get(args.operator)
    except ValueError as e:  # an unknown operator, or options it does not take
        raise UsageError(str(e)) from None
    example = f" (e.g. {'x'.join(map(str, op.example))})" if op.example else ""
    print(f"{op.name}: dims {'x'.join(op.dims)}{example}, dtypes {', '.join(op.dtypes)}, entry {op.entry}(...), "
          f"throughput in {op.throughput_unit}, baselines {', '.join(b.name for b in op.baselines())}")
    print("genes (restrict them under `genome:` in an experiment):")
    width = max(len(n) for n in op.family.genes)
    for gene in op.family.genes.values():
        values = ", ".join(str(v).lower() if isinstance(v, bool) else str(v) for v in gene.values)
        print(f"  {gene.name:<{width}}  [{values}]  {gene.doc}")
    print("descriptors (choose the archive's axes under `descriptors:`):")
    descriptors = op.family.descriptors()
    width = max([len(n) for n in descriptors] + [1])
    for d in descriptors.values():
        needs = " (needs compile-time resources)" if d.needs_resources else ""
        print(f"  {d.name:<{width}}  edges {', '.join(f'{e:g}' for e in d.edges)}  {d.doc}{needs}")
    print(_budget_line())
    return 0


def _budget_line() -> str:
    from evo.experiment.spec import Budget

    b = Budget()
    return (f"budget (per problem, under `budget:`; the first limit reached stops it): evaluations {b.evaluations}, "
            "wall_s (seconds from the problem's first measured candidate), stagnation, sol; min_evaluations "
            f"{b.min_evaluations}: a floor that wall time and stagnation never cut, unless the space is exhausted")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="evo", description="Evolutionary quality-diversity (MAP-Elites) search over Triton GPU kernels.",
                formatter_class=argparse.RawDescriptionHelpFormatter,
                epilog="examples:\n  evo run experiments/quick_gemm.yaml\n  evo status runs/quick_gemm\n"
                       "  evo export runs/quick_gemm --shape 4096x4096x4096 -o kernel.py\n"
                       "  evo report runs/quick_gemm\n\nRun `evo COMMAND --help` for a command's options. "
                       "Docs: README.md.")
    p.add_argument("--version", action="version", version=f"evo-kernels {evo_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    r = sub.add_parser("run", help="search kernels for an experiment (YAML)",
                       description="Search kernels for the problems of an experiment file, storing every evaluation "
                                   "in a run directory (default: <output>/<name> from the file).")
    r.add_argument("experiment", metavar="EXPERIMENT.yaml", help="experiment file, e.g. experiments/quick_gemm.yaml")
    r.add_argument("--out", metavar="DIR", help="run directory (default: <output>/<name> of the experiment)")
    r.add_argument("--resume", action="store_true", help="continue the run stored in the run directory")
    r.add_argument("--allow-changes", action="store_true",
                   help="with --resume: continue even though the experiment changed in what decides results "
                        "(problems, genes, descriptors, seed, evaluation); the run records the change")
    r.set_defaults(func=_cmd_run)

    s = sub.add_parser("status", help="summarise a run as a table", description="Per problem: evaluations, "
                       "ok/failed by status, best throughput, ratio to the baseline, coverage, elapsed time.")
    s.add_argument("run", metavar="RUN", help="run directory")
    s.set_defaults(func=_cmd_status)

    e = sub.add_parser("export", help="write an elite kernel as a standalone Triton module",
                       description="Write the fastest correct kernel of a problem as a module importing only triton "
                                   "and torch, with a header on how it was measured and a self-check "
                                   "(`python FILE.py`). --all writes one module for every measured problem that "
                                   "dispatches to the nearest measured shape.")
    e.add_argument("run", metavar="RUN", help="run directory")
    e.add_argument("--shape", metavar="SHAPE", help="problem shape, e.g. 4096x4096x4096")
    e.add_argument("--dtype", help="problem dtype (fp16, bf16, fp32); needed when the shape has several")
    e.add_argument("--all", action="store_true", help="every measured problem in one dispatching module")
    e.add_argument("-o", "--output", metavar="FILE",
                   help="output file (default: RUN/OPERATOR_SHAPE_DTYPE.py, in the run directory)")
    e.add_argument("--config", action="store_true",
                   help="print the elite's genes and its triton.Config (and a dict of it) for your own kernel, "
                        "instead of writing a module")
    e.set_defaults(func=_cmd_export)

    h = sub.add_parser("report", help="write the run's HTML report (one offline file)",
                       description="Archive heatmaps, failure maps, progress curves and the elites' table in one "
                                   "self-contained HTML file.")
    h.add_argument("run", metavar="RUN", help="run directory")
    h.add_argument("-o", "--output", metavar="FILE", help="output file (default: RUN/report.html)")
    h.add_argument("--x", metavar="DESCRIPTOR", help="descriptor on the heatmaps' x axis (default: the first)")
    h.add_argument("--y", metavar="DESCRIPTOR", help="descriptor on the y axis (default: the next one)")
    h.set_defaults(func=_cmd_report)

    g = sub.add_parser("genes", help="list an operator's genes, domains and descriptors (for experiment files)")
    g.add_argument("operator", nargs="?", metavar="OPERATOR", help="e.g. gemm; omitted: list the operators")
    g.set_defaults(func=_cmd_genes)

    from evo.bench.command import add_bench_command
    from evo.bench.search_bench import add_bench_search_command
    from evo.surface.zoo_command import add_zoo_command
    from evo.surface.zoo_search import search_zoo

    add_bench_command(sub)
    add_bench_search_command(sub)
    add_zoo_command(sub, UsageError, search_zoo)
    return p


def main(argv: list[str] | None = None) -> int:
    reopen_closed_std_fds()  # before any file is opened: a closed 1 must not become the store's descriptor
    try:
        evo_version()  # `python -m evo` beside a folder named evo (a clone) imports that folder as evo
    except ShadowedPackage as e:
        say(f"evo: error: {e}")
        return 2
    args = build_parser().parse_args(argv)
    if not getattr(args, "func", None):
        print("evo: error: no command given; one of run, status, export, report, genes, bench, zoo (see evo --help)",
              file=sys.stderr)
        return 2
    from evo.experiment.config import ConfigError
    from evo.experiment.runlock import RunDirError
    from evo.store.sqlite import StoreError
    from evo.surface.export import ExportError
    from evo.surface.report import ReportError

    status = 141  # what a command that stopped on a broken stdout ends with, as cat does
    try:
        status = args.func(args)
        sys.stdout.flush()  # a reader that went away shows here, not as an error at exit
        return status
    except (ConfigError, UsageError, ExportError, ReportError, RunDirError, StoreError) as e:
        say(f"evo: error: {one_line(str(e))}")
        return 2
    except ModuleNotFoundError as e:  # a dependency missing here (plotly for a report, ray for a run)
        if (package := (e.name or "evo").split(".")[0]) in ("evo", "operators", "genomes"):
            raise
        say(f"evo: error: this command needs the Python package {package!r}, which is not installed here (pip "
            f"install {package}); what earlier steps wrote is kept")
        return 2
    except KeyboardInterrupt:
        say("evo: interrupted")
        return 130
    except BrokenPipeError:  # the reader went away (`evo genes gemm | head`): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        # a run's outcome is in its store and its status says it; only what is read from stdout ends at 141
        return status if args.func is _cmd_run else 141


if __name__ == "__main__":
    sys.exit(main())
