"""A learned surrogate: which of many proposed kernels are worth measuring on the GPU.

Trained online from the run's store rows, failures included, with scikit-learn tree ensembles (no
hand-written regressor): a classifier for the chance that a kernel fails (does not compile, runs out of
resources, is wrong, crashes, ...) and a regressor for how fast it is, relative to the fastest kernel measured
for its problem (y = log(best median / median) <= 0, so rows of different problems share one scale). Features
are the genome's genes (powers of two as log2, booleans as 0/1, categories by index), the problem's sizes
(log2) and element width, what the family derives from both (GenomeFamily.problem_features: a GEMM's grid), and
the compile-time resources (shared memory, registers, spills): known for stored
rows, predicted for a candidate that is not compiled yet by a third ensemble trained on the rows that have them.

The surrogate never gives a fitness: a fitness is always a GPU measurement. It only orders candidates, and the
emitter that uses it keeps an exploration share chosen without it (evo.search.emitters.guided).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evo.problem import Problem
from evo.store.record import Evaluation
from genomes.base import Genome, GenomeFamily

__all__ = ["Surrogate", "Prediction", "RESOURCE_KEYS", "genome_features", "problem_features", "features"]

RESOURCE_KEYS = ("shared", "registers", "spills")
_DTYPE_BYTES = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0}


def _gene_value(values: tuple, value: object) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        positive = all(v > 0 and (int(v) & (int(v) - 1)) == 0 for v in values if v == int(v))
        return math.log2(value) if positive and value > 0 else float(value)
    return float(values.index(value)) if value in values else -1.0


def genome_features(family: GenomeFamily, genome: Genome | dict) -> list[float]:
    """One number per gene of `family`, in gene-name order."""
    values = family.complete(genome.as_dict() if isinstance(genome, Genome) else genome)
    return [_gene_value(family.genes[name].values, values.get(name)) for name in sorted(family.genes)]


def problem_features(problem: Problem) -> list[float]:
    return [math.log2(s) for s in problem.sizes] + [_DTYPE_BYTES.get(problem.dtype, 0.0)]


def features(family: GenomeFamily, genome: Genome | dict, problem: Problem) -> list[float]:
    """A row of the surrogate: the genes, the problem's sizes, and what the family derives from both (its
    problem_features: a GEMM's tiles, programs and K steps per program)."""
    values = family.complete(genome.as_dict() if isinstance(genome, Genome) else genome)
    return genome_features(family, values) + problem_features(problem) + family.problem_features(values, problem)


def _resources(ev: Evaluation) -> list[float] | None:
    r = ev.resources or {}
    if not all(isinstance(r.get(k), (int, float)) for k in RESOURCE_KEYS[:2]):
        return None
    return [math.log2(1.0 + float(r.get(k) or 0.0)) for k in RESOURCE_KEYS]


@dataclass(frozen=True)
class Prediction:
    speed: np.ndarray  # predicted median of best / median (1.0: as fast as the best measured), per candidate
    speed_std: np.ndarray  # spread of that prediction over the ensemble's trees (log scale)
    p_fail: np.ndarray  # predicted chance of failing, per candidate


class Surrogate:
    """Tree ensembles over (genes, problem, resources). `fit` on store rows, then `predict` or `score`."""

    def __init__(self, family: GenomeFamily, *, trees: int = 48, min_rows: int = 12, seed: int = 0) -> None:
        if trees < 1 or min_rows < 2:
            raise ValueError(f"surrogate: trees >= 1 and min_rows >= 2 expected, got {trees}, {min_rows}")
        self.family = family
        self.trees, self.min_rows, self.seed = trees, min_rows, seed
        self.rows_seen = 0  # training rows of the last fit
        self._speed = self._fail = self._res = None
        self._fail_const: float | None = None

    @property
    def ready(self) -> bool:
        """Enough rows to rank: at least `min_rows` usable, of which two correct ones."""
        return self._speed is not None

    def _usable(self, rows: Sequence[Evaluation]) -> list[tuple[Evaluation, Problem, list[float]]]:
        out = []
        genes = set(self.family.genes)
        for ev in rows:
            if ev.status == "invalid":  # rejected before compiling: costs nothing, teaches little
                continue
            try:
                values = self.family.complete(json.loads(ev.genome)["genes"])  # genes added since: implied values
                problem = Problem.from_json(ev.problem)
            except (ValueError, KeyError, TypeError):
                continue
            if set(values) != genes:
                continue
            out.append((ev, problem, features(self.family, values, problem)))
        return out

    def fit(self, rows: Sequence[Evaluation]) -> bool:
        """(Re)train on `rows` (any problems of this family; failures included). Returns `ready`."""
        from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor

        usable = self._usable(rows)
        self.rows_seen = len(usable)
        # speed on each row's fitness clock (its objective's: per-call or GPU time), what the archive ranks by
        ok = [(ev, p, x) for ev, p, x in usable if ev.status == "ok" and ev.fitness_ms and ev.fitness_ms > 0]
        if len(usable) < self.min_rows or len(ok) < 2:
            self._speed = None
            return False
        with_res = [(x, r) for ev, _, x in usable if (r := _resources(ev)) is not None]
        self._res = None
        if len(with_res) >= self.min_rows:
            self._res = ExtraTreesRegressor(n_estimators=self.trees, min_samples_leaf=2, random_state=self.seed)
            self._res.fit(np.array([x for x, _ in with_res]), np.array([r for _, r in with_res]))
        X = self._with_resources(np.array([x for _, _, x in usable]), [ev for ev, _, _ in usable])
        failed = np.array([ev.status != "ok" for ev, _, _ in usable])
        self._fail_const = None
        if failed.all() or not failed.any():
            self._fail_const = float(failed[0])
        else:
            self._fail = ExtraTreesClassifier(n_estimators=self.trees, min_samples_leaf=2, random_state=self.seed)
            self._fail.fit(X, failed)
        best: dict[str, float] = {}
        for ev, _, _ in ok:
            best[ev.problem_key] = min(best.get(ev.problem_key, math.inf), ev.fitness_ms)
        y = np.array([math.log(best[ev.problem_key] / ev.fitness_ms) for ev, _, _ in ok])
        idx = [i for i, (ev, _, _) in enumerate(usable) if ev.status == "ok" and ev.fitness_ms and ev.fitness_ms > 0]
        self._speed = ExtraTreesRegressor(n_estimators=self.trees, min_samples_leaf=1, random_state=self.seed)
        self._speed.fit(X[idx], y)
        return True

    def _with_resources(self, X: np.ndarray, rows: Sequence[Evaluation] | None = None) -> np.ndarray:
        """Append resources: the measured ones of a stored row, else the resource model's prediction."""
        if self._res is None:
            return np.hstack([X, np.zeros((len(X), len(RESOURCE_KEYS)))])
        predicted = self._res.predict(X).reshape(len(X), -1)
        if rows is not None:
            for i, ev in enumerate(rows):
                known = _resources(ev)
                if known is not None:
                    predicted[i] = known
        return np.hstack([X, predicted])

    def predict(self, genomes: Sequence[Genome], problem: Problem) -> Prediction:
        if not self.ready:
            raise RuntimeError("surrogate is not trained yet (see `ready`)")
        base = np.array([features(self.family, g, problem) for g in genomes])
        X = self._with_resources(base)
        # the trees' own input (float32, as the forest converts it), checked once here, not once per tree: a tree's
        # predict checks its input in about 0.2 ms, which 48 trees made most of a guided proposal's scoring
        # (benchmarks.driver_load, reports/gpu/driver-load-simulated.md); the predictions are the same numbers
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        if not np.isfinite(X32).all():
            raise ValueError(f"surrogate: features of {problem.key} are not all finite")
        per_tree = np.stack([t.predict(X32, check_input=False) for t in self._speed.estimators_])
        if self._fail is None:
            p_fail = np.full(len(genomes), self._fail_const or 0.0)
        else:
            proba = self._fail.predict_proba(X)
            p_fail = proba[:, list(self._fail.classes_).index(True)]
        return Prediction(np.exp(per_tree.mean(axis=0)), per_tree.std(axis=0), p_fail)

    def score(self, genomes: Sequence[Genome], problem: Problem, optimism: float = 0.5) -> np.ndarray:
        """Higher is more worth measuring: the chance of success times the optimistic predicted speed (the
        mean plus `optimism` tree spreads, in log space), so an uncertain region is not written off early."""
        p = self.predict(genomes, problem)
        return (1.0 - p.p_fail) * p.speed * np.exp(optimism * p.speed_std)
