"""`evo zoo MODEL ... --run`'s search: every operator's experiment in ONE run (evo.search.run.run_experiments):
one executor (one Ray instance, its workers started once), one progress view over every problem of every
operator, one run directory and store per operator (what `--collect`, `--report` and `evo status` read).

A run an earlier --run left is resumed; one searched to its budget (the same experiment text, every problem
ended) is skipped by the caller. Ctrl-C, SIGTERM or lost workers stop the whole run with what completed stored;
the same `evo zoo ... --run` continues where it stopped.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Sequence
from typing import Any

from evo.surface.zoo_command import ZooRun

__all__ = ["search_zoo"]


def search_zoo(runs: Sequence[ZooRun], again: str, usage_error: type[Exception]) -> int:
    """Search `runs` in one run; returns the exit status (0: every run searched to its budget). `again` is the
    command that continues an interrupted run; bad input (a run that cannot be resumed, experiments that differ
    in executor) raises `usage_error` with one line before any worker starts."""
    from evo.experiment.config import load_experiment
    from evo.experiment.rundir import RunDir
    from evo.surface.progress import Progress
    from evo.surface.safe_stream import DroppingStream

    planned = []
    for i, run in enumerate(runs, 1):
        experiment = load_experiment(run.path)
        rd = RunDir.of(experiment.output, experiment.name)
        _check_before_workers(rd, experiment, run.resume, usage_error)
        planned.append((i, run, experiment, rd))
    if not planned:
        return 0
    out = DroppingStream(sys.stdout)  # a closed or broken stdout drops the progress, never the run
    first = planned[0][2]
    smoke = first.executor.kind == "smoke"
    problems = sum(len(e.problems) for _, _, e, _ in planned)
    print(f"[zoo] searching {len(planned)} operators ({problems} problems) in one run on one {first.executor.kind} "
          f"executor; starting its workers and compiling the first candidates ...", file=out)
    if smoke:
        print("SMOKE RUN: kernels are checked in the CPU Triton interpreter; fitness is NOT a timing.", file=out)
    out.flush()
    progress = Progress([p for _, _, e, _ in planned for p in e.problems], budget=first.budget.evaluations,
                        smoke=smoke, stream=out)
    by_name = {e.name: (i, run) for i, run, e, _ in planned}
    return _search(planned, progress, by_name, len(runs), again, usage_error)


def _search(planned: list[Any], progress: Any, by_name: dict[str, Any], total: int, again: str,
            usage_error: type[Exception]) -> int:
    from evo.evaluate.executor import WorkersLost
    from evo.search.run import StartupError, run_experiments
    from evo.surface.safe_stream import say
    from evo.surface.stop_signals import StopSignals

    def on_run(experiment: Any) -> None:
        i, run = by_name[experiment.name]
        progress.note(f"[zoo {i}/{total}] {run.operator}: {run.roles}"
                      f"{' (resuming the earlier run)' if run.resume else ''}")

    def on_event(event: Any) -> None:
        stops.reassert()  # Ray's init, in the executor's start, took SIGTERM over
        progress(event)

    summaries: list[Any] = []
    with StopSignals() as stops:
        try:
            summaries = run_experiments([(e, rd.path, run.resume) for _, run, e, rd in planned], on_event, on_run)
        except StartupError as e:
            progress.close()
            raise usage_error(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        except KeyboardInterrupt:
            progress.close()
            say(f"[zoo] interrupted: every completed evaluation is stored; `{again}` continues where it stopped")
            return stops.exit_status()
        except WorkersLost as e:
            progress.close()
            say(f"[zoo] error: {e}; `{again}` continues where it stopped")
            return 1
        except (OSError, sqlite3.OperationalError) as e:
            if not _disk_full(e):
                raise
            progress.close()
            say(f"[zoo] error: no space left on the disk: every evaluation stored before is kept; free some space, "
                f"then `{again}` continues where it stopped")
            return 1
        finally:
            progress.close()
    _print_status(planned[: len(summaries)])
    if summaries and summaries[-1].interrupted:
        say(f"[zoo] interrupted: every completed evaluation is stored; `{again}` continues where it stopped")
        return stops.exit_status()
    return 0


def _print_status(planned: list[Any]) -> None:
    """Each searched run's `evo status` table (cut-short problems named under it)."""
    from evo.store.sqlite import Store
    from evo.surface.status import format_status, run_status

    for _, run, experiment, rd in planned:
        try:
            with Store(rd.store, readonly=True) as store:
                rows = run_status(store, experiment)
            print(f"{run.operator}: {rd.path}\n{format_status(rows, experiment.executor.kind == 'smoke')}")
        except (OSError, ValueError, sqlite3.Error):  # the store is the record; `evo status` shows it again
            pass


def _check_before_workers(rd: Any, experiment: Any, resume: bool, usage_error: type[Exception]) -> None:
    """The refusals that need no worker (as `evo run` makes them): a run directory that cannot be one, a new run
    where one exists, a store that cannot be resumed or an experiment changed in what decides results."""
    from evo.experiment.runlock import check_run_path
    from evo.store.resumable import check_resumable, resume_changes
    from evo.store.sqlite import StoreError

    check_run_path(rd.path)
    if rd.exists() and not resume:
        raise usage_error(f"{rd.path} already holds a run that this zoo did not plan to resume")
    if resume:
        check_resumable(rd.store, StoreError)
        resume_changes(rd.store, experiment, False, usage_error)


def _disk_full(e: BaseException) -> bool:
    import errno

    if isinstance(e, sqlite3.OperationalError):
        return "full" in str(e)
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)
