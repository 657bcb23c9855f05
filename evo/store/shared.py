"""Memory across runs: a results database shared by every run on one machine.

It is a store like a run's (evo.store.sqlite: same table, same rows), at a path the experiment names
(`memory.db`), else `$EVO_RESULTS_DB`, else `<user cache dir>/evo/results.sqlite`. Every evaluation a run
measures is copied into it. It serves two things, always for the same GPU model and software versions only:

- `lookup`: a kernel (its source) measured before on this problem is served from it instead of being measured
  again; the served row says so (`worker` "shared#<row id>", as a run store's serves say "store#<row id>").
- `nearest_elites`: the fastest kernels of the problems nearest to a new one (same operator and dtype, nearest
  shape by `evo.problem.shape_distance`) seed its first population.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

from evo.problem import Problem, shape_distance
from evo.store.cache_dir import cache_root
from evo.store.record import MEASURED, Evaluation
from evo.store.sqlite import Store, StoreError

__all__ = ["SharedResults", "default_path", "open_shared", "SHARED_PREFIX", "ENV_VAR", "chain_lookups", "is_served",
           "refuse_own_store"]

ENV_VAR = "EVO_RESULTS_DB"
SHARED_PREFIX = "shared#"
_SERVED_PREFIXES = ("store#", SHARED_PREFIX)


def default_path(configured: str | None = None, fallback: Path | None = None) -> Path:
    """The experiment's path, else $EVO_RESULTS_DB, else <cache>/evo/results.sqlite, <cache> being the platform's
    cache directory when it can be written, else `fallback` (evo.store.cache_dir)."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    return cache_root(fallback) / "evo" / "results.sqlite"


def refuse_own_store(path: Path, store: Path, error: type[Exception] = ValueError) -> None:
    """Raise `error` (one line) when the results database `path` is the run's own store `store`: the same file,
    also through a link, a relative path or a hard link. Every evaluation would be stored in it twice."""
    try:
        same = os.path.samefile(path, store)
    except OSError:  # one of them does not exist yet (a new run), or a link loops: the same resolved name
        same = os.path.realpath(Path(path).expanduser()) == os.path.realpath(store)
    if same:
        raise error(f"the results database {path} is this run's own store {store}: every evaluation would be stored "
                    f"twice; set memory.db (or ${ENV_VAR}) to another file, or memory: false")


def open_shared(path: Path) -> tuple[SharedResults | None, str]:
    """The results database at `path`, or (None, one line saying why) where it cannot be used: it only saves
    measurements, so a run goes on without it rather than fail on it."""
    try:
        return SharedResults(path), ""
    except (OSError, StoreError, sqlite3.Error) as e:
        why = getattr(e, "strerror", None) or str(e)
        return None, (f"warning: the results database {path} cannot be used ({why}); this run goes on without it "
                      f"(set {ENV_VAR} or memory.db to a writable file)")


def is_served(ev: Evaluation) -> bool:
    """A row served from a store (this run's or the shared one) rather than measured."""
    return ev.worker.startswith(_SERVED_PREFIXES)


class SharedResults(Store):
    def record(self, ev: Evaluation, source: str | None = None) -> None:
        """Copy a row a run measured, with its kernel's `source` (served rows are copies already and are not stored
        twice)."""
        if not is_served(ev):
            self.add(dataclasses.replace(ev, id=None), source)

    def lookup(self, source_hash: str, problem_key: str, gpu: str, versions: dict[str, str]) -> Evaluation | None:
        found = super().lookup(source_hash, problem_key, gpu, versions)
        return dataclasses.replace(found, worker=f"{SHARED_PREFIX}{found.id}") if found is not None else None

    def nearest_elites(self, problem: Problem, gpu: str, versions: dict[str, str], limit: int = 8,
                       problems: int = 3) -> list[Evaluation]:
        """Up to `limit` correct rows, one per genome: the fastest of the `problems` nearest problems measured
        on `gpu` with `versions` (the problem itself first when it was measured), by ratio to the baseline (on the
        clock of each row's objective)."""
        if limit < 1:
            return []
        key = json.dumps(versions, sort_keys=True)
        keys = [r[0] for r in self._rows(
            "SELECT DISTINCT problem_key FROM evaluations WHERE operator=? AND gpu=? AND versions_key=? "
            "AND status='ok'", (problem.operator, gpu, key))]
        near: list[tuple[float, Problem]] = []
        for k in keys:
            rows = self.evaluations(k, "ok")
            if not rows:  # every correct row of it damaged (skipped)
                continue
            other = Problem.from_json(rows[0].problem)
            if other.dtype == problem.dtype and len(other.sizes) == len(problem.sizes):
                near.append((shape_distance(other.sizes, problem.sizes), other))
        near.sort(key=lambda dp: (dp[0], dp[1].key))
        out: list[Evaluation] = []
        taken: set[str] = set()
        for _, other in near[:problems]:
            rows = [r for r in self.evaluations(other.key, "ok") if r.gpu == gpu and r.versions_key == key]
            # each row by its own objective's clock: the ratio is to a baseline measured on that same clock
            rows.sort(key=lambda r: (-(r.ratio or 0.0), r.fitness_ms or 0.0, r.id or 0))
            for r in rows:
                if r.genome_hash not in taken:
                    taken.add(r.genome_hash)
                    out.append(r)
                if len(out) >= limit:
                    return out
        return out

    def measured(self, problem_key: str, gpu: str) -> int:
        """Rows of `problem_key` on `gpu` whose status is a property of the kernel (servable)."""
        marks = ", ".join("?" for _ in MEASURED)
        return int(self._rows(f"SELECT COUNT(*) FROM evaluations WHERE problem_key=? AND gpu=? AND status IN ({marks})",
                              (problem_key, gpu, *MEASURED))[0][0])


Lookup = Callable[[str, str, str, dict], "Evaluation | None"]


def chain_lookups(*lookups: Lookup | None) -> Lookup | None:
    """One look-up trying each in turn (the run's store first, then the shared database)."""
    chain = [lk for lk in lookups if lk is not None]
    if not chain:
        return None

    def lookup(source_hash: str, problem_key: str, gpu: str, versions: dict) -> Evaluation | None:
        for lk in chain:
            found = lk(source_hash, problem_key, gpu, versions)
            if found is not None:
                return found
        return None

    return lookup
