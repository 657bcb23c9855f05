"""A small run directory written straight into a Store, so export/report/status tests need no search.

Every row is TEST DATA: its gpu is `TEST_GPU`, its worker and origin say "test-fixture", and its times are
made up from the genome (a stand-in fitness that exists only here, never behind a user's run).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import operators
from evo.modules import source_hash
from evo.problem import HOPPER
from evo.record import Evaluation
from evo.rundir import RunDir
from evo.store import Store

TEST_GPU = "TEST DATA (fixture, not a GPU)"
FAILURES = ("compile_error", "wrong", "out_of_resources", "timeout")


def fixture_yaml(name: str, operator: str, shapes: list[str], dtype: str, descriptors: list[str],
                 kind: str = "ray") -> str:
    return (f"# test fixture experiment\nname: {name}\noperator: {operator}\nproblems:\n"
            f"  shapes: [{', '.join(shapes)}]\n  dtypes: [{dtype}]\n"
            f"descriptors: [{', '.join(descriptors)}]\nexecutor:\n  kind: {kind}\n")


def make_run(root: Path, *, name: str = "fixture", operator: str = "gemm", shapes: tuple[str, ...] = ("64x64x64",),
             dtype: str = "fp16", descriptors: tuple[str, ...] = ("tile_area", "block_k"), n_random: int = 14,
             fast_elite: dict | None = None, smoke: bool = False, seed: int = 0,
             clean_shapes: tuple[str, ...] = ()) -> Path:
    """Write <root>/<name>/ with a store of test rows and the experiment copy; returns the run directory.

    `fast_elite` (gene values over the family's base genome, when it has `base`) is stored as the fastest ok
    evaluation of every problem, so that exports pick a kernel known to be cheap in the interpreter. Every
    fourth evaluation fails, except in `clean_shapes`.
    """
    rd = RunDir.of(root, name)
    rd.path.mkdir(parents=True, exist_ok=True)
    rd.experiment.write_text(fixture_yaml(name, operator, list(shapes), dtype, list(descriptors),
                                          "smoke" if smoke else "ray"))
    op = operators.get(operator)
    fam = op.family
    rng = np.random.default_rng(seed)
    gpu = "cpu-interpreter" if smoke else TEST_GPU
    with Store(rd.store) as store:
        for shape in shapes:
            problem = op.problem(tuple(int(s) for s in shape.split("x")), dtype)
            genomes = list(fam.seeds(problem, HOPPER))[:6]
            genomes += [fam.random(rng, problem, HOPPER) for _ in range(n_random)]
            fast = None
            if fast_elite is not None:
                base = fam.base(**fast_elite) if hasattr(fam, "base") else dict(fast_elite)
                fast = fam.make(base)
                genomes.append(fast)
            baseline_ms = 0.05
            for i, g in enumerate(genomes):
                source = op.render(g, problem, HOPPER)
                clean = g is fast or i % 4 or shape in clean_shapes
                status = "ok" if clean else FAILURES[(i // 4) % len(FAILURES)]
                # made-up time (TEST DATA): a deterministic function of the genome, the fast elite fastest
                ms = 0.02 if g is fast else 0.03 + (int(g.hash[:6], 16) % 1000) / 10000
                ok = status == "ok"
                store.add(Evaluation(
                    operator=operator, problem_key=problem.key, problem=problem.to_json(), genome=g.canonical(),
                    genome_hash=g.hash, source_hash=source_hash(source), status=status,
                    reason="" if ok else f"test data: pretend {status} <b>&</b>", gpu=gpu,
                    versions={"triton": "test", "torch": "test"}, median_ms=ms if ok else None,
                    spread_ms=ms / 50 if ok else None, times_ms=[ms] * 5 if ok else [], baseline="torch-test",
                    baseline_ms=baseline_ms if ok else None, max_rel_error=1e-4 if ok else None,
                    resources={"shared": 32768, "registers": 96}, origin="test-fixture", worker="test-fixture",
                    run_id="fixture", started_at=1.7e9 + i, finished_at=1.7e9 + i + 0.5))
        store.set_meta("note", "test fixture: every row is made-up test data")
        store.set_meta("experiment", name)  # as evo.search records it
        store.set_meta("executor", "smoke" if smoke else "ray")
    return rd.path
