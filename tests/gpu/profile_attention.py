"""Run SDPA's cuDNN and flash backends and the committed attention bench's elite once each at one problem, for a
profiler (ncu) to read.

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        python tests/gpu/profile_attention.py attention:1x32x8x8192x8192x128:bf16

Each runs twice (the first round also compiles and loads evo's kernel): read the second launch of each kernel.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch

    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    key = argv[0] if argv else "attention:1x32x8x8192x8192x128:bf16"
    root = Path(__file__).resolve().parents[2]
    bench = json.loads((root / "reports/bench/attention-nvidia-h100-80gb-hbm3.json").read_text())
    row = next(p for p in bench["problems"] if p["key"] == key)
    op = operators.get(key.split(":")[0])
    problem = op.problem(tuple(int(x) for x in key.split(":")[1].split("x")), key.rsplit(":", 1)[1])
    module = load_source(op.render(op.family.make({**op.family.base(), **row["evo_genome"]}), problem,
                                   Target.from_torch()))
    q, k, v = op.make_inputs(problem, 0, device="cuda")[:3]
    rivals = [b for b in op.bench_baselines() if b.name in ("sdpa_cudnn", "sdpa_flash")]
    for _ in range(2):  # the second round is the one to read
        for rival in rivals:
            rival.make(problem)(q, k, v)
        module.attention(q, k, v)
    torch.cuda.synchronize()
    print("profiled", key, row["evo_genome"], [r.name for r in rivals])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
