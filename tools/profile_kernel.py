"""Run one evo kernel and the contenders users would pick instead, for a profiler (ncu) to read.

    ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight --section WarpStateStats \
        python tools/profile_kernel.py KEY [--genome JSON | --bench FILE] [--rivals NAME,NAME]

KEY is operator:shape:dtype (`gemm:3000x3000x3000:bf16`, `attention:1x32x8x8192x8192x128:bf16`). The kernel is the
genome given as JSON or a .json file of it (its genes over the family's base), else the elite of KEY in a committed
bench file (`reports/bench/*.json`), else the family's first seed for KEY on this GPU. The rivals are the
operator's bench baselines of those names (default: its primary baseline, cuBLAS or SDPA as a user calls it).

Everything runs twice, the first round compiling and loading evo's kernel; the second round sits in an NVTX range
"profile", so `--nvtx --nvtx-include "profile/"` makes ncu read only the second launch of each kernel. Then each
is timed (evo.evaluate.timing: L2 flushed, interleaved) and a line per contender says its median and throughput.
Under ncu those medians carry the profiler's launch interception (kernels of ~100 us read 30-60% slow on an H200):
run the script without ncu for the clock a profile explains.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _genome(op: Any, problem: Any, target: Any, genome: str | None, bench: str | None) -> Any:
    if genome:
        text = Path(genome).read_text() if genome.endswith(".json") else genome
        return op.family.make({**op.family.base(), **json.loads(text)})
    if bench:
        rows = json.loads(Path(bench).read_text())["problems"]
        row = next((r for r in rows if r["key"] == problem.key), None)
        if row is None:
            raise SystemExit(f"profile_kernel: {problem.key} is not in {bench}")
        return op.family.make({**op.family.base(), **row["evo_genome"]})
    return op.family.seeds(problem, target)[0]


def contenders(key: str, genome: str | None = None, bench: str | None = None, rivals: str = "") -> tuple:
    """(op, problem, genome, {name: callable}, inputs) for KEY: evo's kernel (last) and the named bench baselines
    (default: the operator's primary one), on CUDA inputs of seed 0. Also used by tools/probe_graph_clock.py."""
    if __package__ in (None, ""):
        sys.path.insert(0, str(ROOT))
    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    name, shape, dtype = key.split(":")
    op, target = operators.get(name), Target.from_torch()
    problem = op.problem(tuple(int(x) for x in shape.split("x")), dtype)
    chosen = _genome(op, problem, target, genome, bench)
    module = load_source(op.render(chosen, problem, target))
    wanted = [n for n in rivals.split(",") if n] or [op.baselines()[0].name]
    known = {b.name: b for b in op.bench_baselines()}
    missing = [n for n in wanted if n not in known]
    if missing:
        raise SystemExit(f"no baseline {missing[0]!r} for {name}; known: {sorted(known)}")
    calls = {n: known[n].make(problem) for n in wanted}
    calls["evo"] = getattr(module, op.entry)
    return op, problem, chosen, calls, op.make_inputs(problem, 0, device="cuda")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="profile_kernel.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("key", help="operator:shape:dtype")
    ap.add_argument("--genome", help="the kernel's genes as JSON, or a .json file of them (over the family's base)")
    ap.add_argument("--bench", help="a committed bench JSON whose elite for KEY is the kernel")
    ap.add_argument("--rivals", default="", help="bench baselines to run beside it, comma-separated")
    args = ap.parse_args(argv)

    import torch

    op, problem, genome, calls, inputs = contenders(args.key, args.genome, args.bench, args.rivals)
    from evo.evaluate.timing import time_interleaved

    wanted = [n for n in calls if n != "evo"]
    for round_ in range(2):
        if round_:
            torch.cuda.nvtx.range_push("profile")
        for fn in calls.values():
            fn(*inputs)
        torch.cuda.synchronize()
        if round_:
            torch.cuda.nvtx.range_pop()
    timings = time_interleaved([lambda f=fn: f(*inputs) for fn in calls.values()], reps=30)
    print(f"profiled {problem.key} on {torch.cuda.get_device_name()}: evo genome {genome.canonical()}")
    for label, t in zip(calls, timings, strict=True):
        print(f"  {label:14s} {t.median_ms * 1e3:9.1f} us  {op.throughput(problem, t.median_ms):8.1f} "
              f"{op.throughput_unit}  x{timings[0].median_ms / t.median_ms:.3f} of {wanted[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
