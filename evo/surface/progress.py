"""The live view of a run: per problem, evaluations, best so far and its ratio to the baseline, failures by kind,
and GPU workers busy, fed by the search's events (evo.search.events.SearchEvent).

On a terminal the view is a block of lines redrawn in place with ANSI escapes (at most a few times a second);
when stdout is not a terminal (a log file, CI) it degrades to plain log lines: one per new best, one per
finished problem, messages, and a heartbeat summary every `heartbeat_s` seconds. Standard library only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from evo.problem import Problem
from evo.surface.smoke_label import smoke_score

__all__ = ["Progress", "ProblemRow"]

_ABBREV = {"invalid": "inv", "compile_error": "cmp", "out_of_resources": "oor", "wrong": "wrong", "nan": "nan",
           "crashed": "crash", "timeout": "tmo", "error": "err"}


@dataclass
class ProblemRow:
    key: str
    budget: int | None = None
    evaluations: int = 0
    best: float | None = None
    best_ratio: float | None = None
    sol_share: float | None = None  # the best's share of the speed-of-light floor (None: no floor known)
    unit: str = ""
    failures: dict[str, int] = field(default_factory=dict)
    coverage: float = 0.0
    state: str = "waiting"  # waiting, running, done
    reason: str = ""
    elapsed_s: float = 0.0  # in this problem's search (earlier sessions included), as of its latest event
    seen_at: float = 0.0  # the progress clock at that event


def _clock_text(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """Receives SearchEvents (call it with one) and shows them on `stream`.

    `smoke` labels throughputs as not timings (a smoke run's fitness comes from the CPU interpreter). `wall_s`:
    each problem's wall-time budget; with it or an evaluation budget the view shows the time left (eta_s).
    """

    def __init__(self, problems: Sequence[Problem] = (), budget: int | None = None, stream: TextIO | None = None,
                 tty: bool | None = None, smoke: bool = False, heartbeat_s: float = 10.0, min_redraw_s: float = 0.2,
                 clock: Callable[[], float] = time.monotonic, wall_s: float | None = None) -> None:
        self.wall_s = wall_s
        self.stream = stream or sys.stdout
        self.tty = bool(tty if tty is not None else getattr(self.stream, "isatty", lambda: False)())
        self.rows: dict[str, ProblemRow] = {p.key: ProblemRow(p.key, budget) for p in problems}
        self.smoke = smoke
        self.busy: int | None = None
        self.total: int | None = None
        self.heartbeat_s = heartbeat_s
        self.min_redraw_s = min_redraw_s
        self.clock = clock
        self.t0 = clock()
        self._drawn = 0
        self._last_draw = -1e18
        self._last_beat = self.t0
        self._closed = False
        self.started = False  # an event arrived: the search has begun

    # -- events ---------------------------------------------------------------------------------------
    def __call__(self, event: Any) -> None:
        self.started = True
        row = self.rows.get(event.problem_key)
        if row is None:
            row = self.rows[event.problem_key] = ProblemRow(event.problem_key, event.budget)
        previous_best = row.best
        row.evaluations, row.budget, row.unit = event.evaluations, event.budget, event.unit
        row.best, row.best_ratio = event.best, event.best_ratio
        row.sol_share = getattr(event, "sol_share", None)
        row.failures, row.coverage = dict(event.failures), event.coverage
        row.elapsed_s, row.seen_at = float(getattr(event, "elapsed_s", 0.0) or 0.0), self.clock()
        self.busy, self.total = event.busy_workers, event.total_workers
        force = False
        if event.kind == "problem_start":
            row.state = "running"
            self._log(f"{row.key}: started ({row.evaluations} evaluations already stored)" if row.evaluations
                      else f"{row.key}: started")
            force = True
        elif event.kind == "problem_done":
            row.state, row.reason = "done", event.reason
            self._log(f"{row.key}: done ({event.reason}): {row.evaluations} evaluations, best {self._best(row)}"
                      f"{', failures ' + self._failures(row) if row.failures else ''}")
            force = True
        elif event.kind == "message":
            self._log(event.message, always=True)
            force = True
        elif event.kind == "evaluation":
            row.state = "running"
            if row.best is not None and (previous_best is None or row.best > previous_best):
                self._log(f"{row.key}: new best {self._best(row)} at evaluation {row.evaluations}")
        self._refresh(force)

    def note(self, text: str) -> None:
        """A line for the user outside any problem's events (e.g. which of a zoo's operators starts)."""
        self._log(text, always=True)
        self._refresh(force=True)

    def close(self) -> None:
        """Draw the final state (terminal) or a last summary line (log)."""
        if self._closed:
            return
        self._closed = True
        if self.tty:
            self._refresh(force=True)
        else:
            self._log(self._summary(), always=True)
        self.stream.flush()

    # -- time left ------------------------------------------------------------------------------------
    def eta_s(self) -> float | None:
        """Seconds until every problem's search reaches its budget: per problem the earlier of its evaluations
        left at its own rate so far (a waiting problem: the latest rate seen) and its wall time left. None where
        a problem has neither budget, or no rate is known yet for an evaluation budget alone. A search that
        stagnates or reaches its floor ends sooner; a problem held to its minimum evaluations, later."""
        now = self.clock()
        rows = list(self.rows.values())
        rates = [r.evaluations / r.elapsed_s for r in rows if r.evaluations and r.elapsed_s > 0]
        latest = rates[-1] if rates else None
        left = 0.0
        for r in rows:
            if r.state == "done":
                continue
            elapsed = r.elapsed_s + (now - r.seen_at if r.state == "running" else 0.0)
            rate = r.evaluations / elapsed if r.evaluations and elapsed > 0 else latest
            limits = [max(self.wall_s - elapsed, 0.0)] if self.wall_s else []
            if r.budget and rate:
                limits.append(max(r.budget - r.evaluations, 0) / rate)
            if not limits:
                return None
            left += min(limits)
        return left

    def _eta_text(self) -> str:
        eta = self.eta_s()
        return "" if eta is None else f"about {_clock_text(eta)} left"

    # -- text -----------------------------------------------------------------------------------------
    def _best(self, row: ProblemRow) -> str:
        if row.best is None:
            return "-"
        if self.smoke:
            return smoke_score(row.best)
        ratio = f" ({row.best_ratio:.2f}x baseline)" if row.best_ratio else ""
        sol = f", {row.sol_share:.0%} of SOL" if row.sol_share is not None else ""
        return f"{row.best:.4g} {row.unit}{ratio}{sol}"

    @staticmethod
    def _failures(row: ProblemRow) -> str:
        return " ".join(f"{_ABBREV.get(k, k)} {n}" for k, n in sorted(row.failures.items(), key=lambda kv: -kv[1]))

    def _workers(self) -> str:
        if self.busy is None:
            return ""
        return f"GPU workers busy {self.busy}/{self.total}" if not self.smoke else \
            f"CPU interpreter workers busy {self.busy}/{self.total}"

    def lines(self) -> list[str]:
        """The block the terminal view shows."""
        width = max([len(k) for k in self.rows] + [7])
        eta = self._eta_text()
        out = [f"evo  {_clock_text(self.clock() - self.t0)} elapsed{', ' + eta if eta else ''}   "
               f"{self._workers()}".rstrip()]
        if self.smoke:
            out.append("SMOKE RUN: fitness from the CPU interpreter is NOT a timing")
        out.append(f"{'problem':<{width}}  {'evals':>9}  {'state':<7}  {'best':<42}  {'cover':>5}  failures")
        for r in self.rows.values():
            evals = f"{r.evaluations}/{r.budget}" if r.budget else str(r.evaluations)
            out.append(f"{r.key:<{width}}  {evals:>9}  {r.state:<7}  {self._best(r):<42}  {r.coverage:>5.0%}  "
                       f"{self._failures(r) or '-'}")
        return out

    def _summary(self) -> str:
        total = sum(r.evaluations for r in self.rows.values())
        done = sum(r.state == "done" for r in self.rows.values())
        workers = self._workers()
        eta = self._eta_text() if done < len(self.rows) else ""
        return (f"{total} evaluations, {done}/{len(self.rows)} problems done" + (f", {eta}" if eta else "")
                + (f", {workers}" if workers else ""))

    # -- output ---------------------------------------------------------------------------------------
    def _refresh(self, force: bool = False) -> None:
        now = self.clock()
        if self.tty:
            if force or now - self._last_draw >= self.min_redraw_s:
                self._draw()
                self._last_draw = now
        elif now - self._last_beat >= self.heartbeat_s:
            self._last_beat = now
            self._log(self._summary())

    def _draw(self) -> None:
        lines = self.lines()
        if self._drawn:  # back to the block's first line, then clear to the end of the screen
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
        self.stream.write("".join(line + "\n" for line in lines))
        self.stream.flush()
        self._drawn = len(lines)

    def _log(self, text: str, always: bool = False) -> None:
        """A log line; on a terminal only `always` lines are printed (above the redrawn block)."""
        if self.tty:
            if not always:
                return
            if self._drawn:
                self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
                self._drawn = 0
            self.stream.write(text + "\n")
            return
        self.stream.write(f"[{_clock_text(self.clock() - self.t0)}] {text}\n")
        self.stream.flush()
