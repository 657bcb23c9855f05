"""Synthetic evaluation rows and stores for the scaling package's CPU tests: every row is TEST DATA (its gpu says
so), its times made up by the test that asks for it."""

from __future__ import annotations

import json
from pathlib import Path

import operators
from evo.problem import Problem
from evo.store import Evaluation, Store
from evo.store.sources import source_hash

TEST_GPU = "TEST DATA (synthetic, not a GPU)"


def gemm(shape: str, dtype: str = "fp16") -> Problem:
    return operators.get("gemm").problem(tuple(int(s) for s in shape.split("x")), dtype)


def row(problem: Problem, finished: float, ms: float | None, status: str = "ok", *, worker: str = "w0",
        gpu: str = TEST_GPU, took: float = 0.5, objective: str = "gpu", row_id: int | None = None,
        compile_s: float | None = 0.2) -> Evaluation:
    """One row of `problem` that finished at `finished` (seconds), its fitness `ms` on `objective`'s clock."""
    ok = status == "ok"
    clock = {"median_ms": ms if ok else None, "call_ms": ms if ok else None}
    if objective == "call" and ok and ms is not None:
        clock["median_ms"] = ms * 10  # the other clock: never read as this row's fitness
    text = kernel(finished)
    return Evaluation(operator=problem.operator, problem_key=problem.key, problem=problem.to_json(),
                      genome=json.dumps({"genes": {"t": finished}}), genome_hash=f"h{finished}",
                      source_hash=source_hash(text), status=status, gpu=gpu, worker=worker,
                      started_at=finished - took, finished_at=finished, objective=objective, compile_s=compile_s,
                      id=row_id, **clock)


def kernel(finished: float) -> str:
    return f"# a made-up kernel text (test data) {finished}\n" * 40


def queue(mean: float, most: int, seconds: float) -> dict:
    """A queue summary as the search saves it (every stage the same mean and largest count)."""
    return {"seconds": seconds, **{k: {"mean": mean, "max": most} for k in ("waiting", "compiling", "ready",
                                                                             "at_workers")}}


def write_store(path: Path, rows: list[Evaluation], meta: dict) -> Path:
    """A store at `path` holding `rows`, each with its kernel text, and the metadata `meta`."""
    with Store(path) as store:
        for r in rows:
            store.add(r, source=kernel(r.finished_at))
        for k, v in meta.items():
            store.set_meta(k, v)
    return path


def write_measure(folder: Path, gpus: int, **extra) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "measure.json").write_text(json.dumps({"gpus": gpus, "exit_status": 0, "interrupted": False,
                                                     "evo_s": 60.0, "queue_snapshots": [], **extra}))
