"""The surrogate-guided emitter: many children drawn, the learned surrogate picks the one worth measuring.

Each proposal draws a pool of distinct children with the experiment's mix (cheap: microseconds each, in the
search's process), scores them with the surrogate (evo.search.surrogate: predicted speed and chance of failing,
from genes, problem and predicted compile-time resources) and proposes the best. A share `explore` of the
proposals is a pool member drawn uniformly instead, so the archive keeps filling where the model is wrong, and
until the surrogate has enough rows (`min_rows`) every proposal is drawn that way. The surrogate is retrained
from the store's rows every `refit_every` proposals, and once it has learnt from many rows, only when they
have grown by about a tenth since: a refit costs time in proportion to the rows, and it runs in the search's
own process, which every GPU waits on (2,000 GEMM rows took 0.5 s on a 2-core CPU box). So a refit trains a new
surrogate in a thread (scikit-learn builds trees without holding the interpreter's lock) while the proposals
go on with the old one, and the new one takes over `fit_lag` proposals after the refit began, waiting for it
only if it is not done by then: the same proposal whatever the machine's speed, so a seeded search stays
reproducible (0: the refit is made in place, in the proposal that asks for it). Whatever it picks is measured
on the GPU like any other child: the surrogate only chooses what to measure.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from evo.search.emitters.base import EmitContext, Emitter
from evo.search.surrogate import Surrogate
from evo.store.record import Evaluation

__all__ = ["GuidedEmitter"]

_REFIT_GROWTH = 10  # past refit_every * this many rows, refit once the rows grew by 1/this since the last fit


class _Fit:
    """A surrogate being trained in a thread on a snapshot of rows; `result` waits for it."""

    def __init__(self, surrogate: Surrogate, rows: Sequence[Evaluation]) -> None:
        self.surrogate, self.error = surrogate, None
        self.thread = threading.Thread(target=self._fit, args=(rows,), name="evo-surrogate-fit", daemon=True)
        self.thread.start()

    def _fit(self, rows: Sequence[Evaluation]) -> None:
        try:
            self.surrogate.fit(rows)
        except BaseException as e:  # raised in the search's thread, by result()
            self.error = e

    def result(self) -> Surrogate:
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.surrogate


class GuidedEmitter(Emitter):
    name = "guided"

    def __init__(self, pool: int = 32, explore: float = 0.2, refit_every: int = 8, min_rows: int = 12,
                 trees: int = 48, fit_lag: int = 4) -> None:
        checks = [(pool, "pool", 2), (refit_every, "refit_every", 1), (min_rows, "min_rows", 2), (trees, "trees", 1),
                  (fit_lag, "fit_lag", 0)]
        for value, key, low in checks:
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"guided: {key} must be an integer >= {low}, got {value!r}")
        if isinstance(explore, bool) or not isinstance(explore, (int, float)) or not 0.0 <= explore <= 1.0:
            raise ValueError(f"guided: explore must be a number in [0, 1], got {explore!r}")
        self.pool, self.explore, self.refit_every, self.min_rows, self.trees, self.fit_lag = \
            pool, float(explore), refit_every, min_rows, trees, fit_lag
        self.surrogate: Surrogate | None = None
        self._since_fit = 0
        self._fitting: _Fit | None = None  # a refit under way in a thread
        self._fit_age = 0  # proposals since it began
        self.picked_by_model = 0  # proposals chosen by the surrogate (the rest: exploration or not yet trained)

    def _refit(self, ctx: EmitContext) -> None:
        family = ctx.variation.family
        if self.surrogate is None or self.surrogate.family is not family:
            if self._fitting is not None:
                self._fitting.result()  # (another family's: not used)
            self.surrogate, self._fitting = self._new(family, ctx), None
            self._since_fit = self.refit_every
        if self._fitting is not None:
            self._fit_age += 1
            if self._fit_age >= self.fit_lag:
                self.surrogate, self._fitting = self._fitting.result(), None
        if self._fitting is None and self._since_fit >= max(self.refit_every,
                                                            self.surrogate.rows_seen // _REFIT_GROWTH):
            if self.fit_lag == 0:
                self.surrogate.fit(ctx.rows())
            else:
                self._fitting, self._fit_age = _Fit(self._new(family, ctx), ctx.rows()), 0
            self._since_fit = 0
        self._since_fit += 1

    def _new(self, family: Any, ctx: EmitContext) -> Surrogate:
        return Surrogate(family, trees=self.trees, min_rows=self.min_rows, seed=ctx.seed)

    def _pool(self, ctx: EmitContext) -> list[Any]:
        taken = set(ctx.seen)
        out = []
        for _ in range(self.pool):
            proposal = ctx.variation.child(ctx.archive, taken, ctx.rng)
            if proposal.genome.hash in taken:  # the space near the elites is used up
                break
            taken.add(proposal.genome.hash)
            out.append(proposal)
        return out

    def propose(self, ctx: EmitContext) -> Any:
        self._refit(ctx)
        pool = self._pool(ctx)
        if not pool:
            return ctx.variation.child(ctx.archive, ctx.seen, ctx.rng)
        explore = ctx.rng.random() < self.explore
        if explore or self.surrogate is None or not self.surrogate.ready:
            return pool[int(ctx.rng.integers(len(pool)))]
        scores = self.surrogate.score([p.genome for p in pool], ctx.problem)
        self.picked_by_model += 1
        return pool[int(scores.argmax())]
