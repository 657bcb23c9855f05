"""Run a committed bench's elite and the eager contender once each at one problem, for a profiler to read.

    ncu --clock-control none --section SpeedOfLight --csv \
        python tools/profile_fused.py reports/bench/gemm-swiglu-nvidia-h100-80gb-hbm3.json 2048x14336x4096

The elite is rendered from the bench file's genome (any operator: `gemm+swiglu`, `softmax`, ...); eager is the
operator's primary baseline (for fused GEMMs: cuBLAS, then the epilogue's torch ops). Each runs three times after
the inputs are made; read the last launch of each kernel name. Prints the kernel names each side launched.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch

    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Problem, Target

    doc = json.loads(Path(argv[0]).read_text())
    sizes = Problem.parse_shape(argv[1])
    op = operators.get(doc["operator"])
    entry = next(p for p in doc["problems"] if tuple(p[d] for d in op.dims) == sizes)
    problem = op.problem(sizes, entry.get("dtype", "bf16"))
    genome = op.family.make(entry["evo_genome"])
    module = load_source(op.render(genome, problem, Target.from_torch()))
    inputs = op.make_inputs(problem, 0)
    evo = getattr(module, op.entry)
    eager = op.baselines()[0].make(problem)
    torch.cuda.synchronize()
    for _ in range(3):
        torch.cuda.nvtx.range_push("eager")
        eager(*inputs)
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("evo")
        evo(*inputs)
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    print(f"profiled {problem.key}: evo genome {genome}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
