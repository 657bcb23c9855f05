"""How many evaluations each set of emitters needs on the real GEMM genome space, with a MADE-UP fitness.

    python -m tests.search.model_search [--budget 150] [--seeds 8] [--fitness structured|hash]
        [--methods "variation,guided,exploit,restart;variation,exploit,restart;variation"]

NOTHING HERE IS A GPU TIMING. The fitness is a model: `structured` (roofline time times smooth penalties on the
genes, one interaction of tile area and warps, and wave quantisation over 132 SMs: something a learned model
can learn), or `hash` (the operator's smoke_cost: a roofline time stretched by a factor drawn from the genome's
hash, i.e. pure noise that no search or model can learn). It runs the search's own loop (emitters, scheduler,
surrogate, archive) in this process, without rendering cost beyond the pipeline's render stage, and prints per
shape and method the evaluations to reach 99% of the best any method found, per seed (None: not reached).
A method is a comma-separated emitter list; `name:key=value` sets an integer setting (e.g. guided:pool=64).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from evo.bench.search_bench import trace
from evo.bench.search_results import reach
from evo.evaluate import Backend, Worker, WorkerInfo
from evo.evaluate.executor import LocalExecutor
from evo.experiment.spec import Budget, EmitterSpec, ExecutorSpec, Experiment, MemorySpec
from evo.problem import HOPPER
from evo.search.loop import Search
from evo.store.sqlite import Store

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16, 4096, 4096), (1000, 3000, 2000))
MODEL_GPU = "MODEL (not a GPU, not a timing)"


def structured_ms(op: Any, g: Any, p: Any) -> float:
    m, n, _ = p.sizes
    tiles = math.ceil(m / g["BLOCK_M"]) * math.ceil(n / g["BLOCK_N"])
    waves = math.ceil(tiles / 132) * 132 / tiles
    area = math.log2(g["BLOCK_M"] * g["BLOCK_N"])
    f = (1 + 0.08 * abs(area - 14) + 0.05 * abs(math.log2(g["BLOCK_K"]) - 6) + 0.04 * abs(g["num_stages"] - 4)
         + 0.06 * abs(math.log2(g["num_warps"]) - (2 + (area - 12) / 2)) + 0.02 * (g["GROUP_M"] == 1))
    return float(op.smoke_roofline_ms(p)) * f * waves


class ModelWorker(Worker):
    def __init__(self, fitness: str) -> None:
        self.fitness = fitness
        self._info = WorkerInfo("model", MODEL_GPU, {"model": fitness}, HOPPER)

    @property
    def info(self) -> WorkerInfo:
        return self._info

    def evaluate(self, cand: Any, timeout_s: float) -> Any:
        op, g, p = cand.operator, cand.genome, cand.problem
        ms = structured_ms(op, g, p) if self.fitness == "structured" else float(op.smoke_cost(g, p))
        return cand.row("ok", "model fitness, not a timing", median_ms=ms, baseline_ms=float(op.smoke_roofline_ms(p)),
                        gpu=MODEL_GPU, versions=dict(self._info.versions))


class ModelBackend(Backend):
    needs_gpu = False

    def __init__(self, fitness: str) -> None:
        self.fitness = fitness

    def open_worker(self, device_index: int) -> Worker:
        return ModelWorker(self.fitness)


def emitter_specs(method: str) -> tuple[EmitterSpec, ...]:
    out = []
    for item in method.split(","):
        name, *settings = item.split(":")
        out.append(EmitterSpec(name, tuple((k, int(v)) for k, v in (s.split("=") for s in settings))))
    return tuple(out)


def main() -> None:
    import operators

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget", type=int, default=150)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--fitness", choices=("structured", "hash"), default="structured")
    ap.add_argument("--methods", default="variation,guided,exploit,restart;variation,exploit,restart;variation")
    args = ap.parse_args()
    op = operators.get("gemm")
    methods = args.methods.split(";")
    print(f"fitness: {args.fitness} MODEL, not a timing; budget {args.budget}; seeds {args.seeds}")
    for shape in SHAPES:
        problem = op.problem(shape, "bf16")
        base = Experiment(name="m", operator="gemm", problems=(problem,), budget=Budget(evaluations=args.budget),
                          executor=ExecutorSpec(kind="local"), memory=MemorySpec(enabled=False))
        found: dict[str, list[Any]] = {m: [] for m in methods}
        for seed in range(args.seeds):
            traces = {}
            for m in methods:
                exp = dataclasses.replace(base, seed=seed, emitters=emitter_specs(m))
                with Store(Path(tempfile.mkdtemp()) / "s.sqlite") as store, \
                        LocalExecutor(ModelBackend(args.fitness)) as ex:
                    t0 = time.time()
                    Search(exp, op, store, ex, run_id="m#1").run()
                    traces[m] = trace(store.evaluations(), op, problem, t0)
            best = max(t[-1][2] for t in traces.values())
            for m in methods:
                found[m].append(reach(traces[m], 0.99 * best)[1])
        print(problem.key)
        for m, v in found.items():
            got = [x for x in v if x is not None]
            print(f"  {m:<40} median {statistics.median(got) if got else '-':>6}  reached {len(got)}/{len(v)}  {v}")


if __name__ == "__main__":
    main()
