"""The surrogate trained on store rows (failures included) ranks unseen genomes by the stand-in's speed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import spearmanr

from evo.evaluate.executor import LocalExecutor
from evo.search.loop import Search
from evo.search.surrogate import Surrogate, features, genome_features
from evo.store.sqlite import Store
from tests.fixtures import search_fixtures as fx


@pytest.fixture(autouse=True)
def _operator(monkeypatch):
    fx.register(monkeypatch)


def _all_valid(op, problem):
    import itertools

    fam = op.family
    names = sorted(fam.genes)
    out = []
    for values in itertools.product(*(fam.genes[n].values for n in names)):
        g = fam.make(dict(zip(names, values, strict=True)))
        if not fam.violations(g, problem, None):
            out.append(g)
    return out


def test_surrogate_learns_speed_and_failure_from_the_store(tmp_path):
    import operators

    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), evaluations=30, seed=3)
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend(), lookup=store.lookup) as ex:
        Search(exp, op, store, ex, run_id="t#1").run()
        rows = store.evaluations()
    surrogate = Surrogate(op.family, min_rows=12, seed=0)
    assert not surrogate.ready and surrogate.fit(rows[:5]) is False  # too few rows: no ranking yet
    assert surrogate.fit(rows) and surrogate.ready and surrogate.rows_seen == len(rows)
    problem = exp.problems[0]
    seen = {r.genome_hash for r in rows}
    unseen = [g for g in _all_valid(op, problem) if g.hash not in seen and not fx.stand_in_fails(g)]
    assert len(unseen) >= 10
    pred = surrogate.predict(unseen, problem)
    truth = [1.0 / fx.stand_in_ms(g) for g in unseen]
    rho = spearmanr(pred.speed, truth).statistic
    assert rho > 0.5, rho  # it ranks kernels it never saw (a blind ranking would be near 0)
    top = unseen[int(np.argmax(surrogate.score(unseen, problem)))]
    assert fx.stand_in_ms(top) <= np.quantile([fx.stand_in_ms(g) for g in unseen], 0.25)


def _fails(g) -> bool:
    """A made-up failure rule for this test (an interaction of two genes), not the stand-in's own."""
    return g["ITEMS"] == 4 and g["num_warps"] >= 4


def test_surrogate_predicts_failures():
    import operators

    op = operators.get(fx.OPERATOR)
    problem = op.problem((512,), "fp32")
    genomes = _all_valid(op, problem)
    from evo.evaluate.candidate import Candidate

    rows = []
    for g in genomes:
        cand = Candidate(problem, g, op)
        if _fails(g):
            rows.append(cand.row("compile_error", "stand-in failure", gpu=fx.STAND_IN_GPU))
        else:
            rows.append(cand.row("ok", median_ms=fx.stand_in_ms(g), baseline_ms=1.5, gpu=fx.STAND_IN_GPU))
    rng = np.random.default_rng(0)
    order = rng.permutation(len(rows))
    train = [rows[i] for i in order[: len(rows) * 2 // 3]]
    test = [genomes[i] for i in order[len(rows) * 2 // 3:]]
    s = Surrogate(op.family, seed=0)
    assert s.fit(train)
    p = s.predict(test, problem).p_fail
    failing = np.array([_fails(g) for g in test])
    assert failing.any() and (~failing).any()
    assert p[failing].min() > p[~failing].max()  # every failing kernel ranked as riskier than every working one
    assert len(genome_features(op.family, test[0])) == len(op.family.genes)


def test_prediction_is_the_checked_trees_own(tmp_path, monkeypatch):
    """predict checks its input once, not once per tree: the same numbers as every tree's own checked predict."""
    import operators

    op = operators.get(fx.OPERATOR)
    exp = fx.experiment(sizes=(512,), evaluations=30, seed=3)
    with Store(tmp_path / "s.sqlite") as store, LocalExecutor(fx.StandInBackend(), lookup=store.lookup) as ex:
        Search(exp, op, store, ex, run_id="t#1").run()
        rows = store.evaluations()
    surrogate = Surrogate(op.family, trees=8, min_rows=12, seed=0)
    assert surrogate.fit(rows)
    problem = exp.problems[0]
    genomes = _all_valid(op, problem)[:20]
    X = surrogate._with_resources(np.array([features(op.family, g, problem) for g in genomes]))
    per_tree = np.stack([t.predict(X) for t in surrogate._speed.estimators_])  # each tree checking its input
    pred = surrogate.predict(genomes, problem)
    assert np.array_equal(pred.speed, np.exp(per_tree.mean(axis=0)))
    assert np.array_equal(pred.speed_std, per_tree.std(axis=0))
    # what each tree's check refused, predict still refuses (in one line)
    monkeypatch.setattr(surrogate, "_with_resources", lambda base: np.full((len(base), X.shape[1]), math.inf))
    with pytest.raises(ValueError, match="not all finite"):
        surrogate.predict(genomes[:1], problem)
