"""GPU probe: which Triton warp-specialized GEMM genomes leave outputs unwritten.

The GEMM sample on an H200 (2026-11-27, night) found one valid genome, BLOCK 64x32x32, loop_stages=2,
num_stages=3, in-kernel descriptors, warp_specialize=True, whose output at 4096^3 held 3,456 NaN (the check
poisons the output, so these were never written). This probe walks the genes around it: every tile of
BLOCK_M in (64, 128), BLOCK_N in (32, 64, 128, 256), BLOCK_K in (32, 64) at each pipeline depth (loop_stages
0, 2, 3, 4), plus num_stages 2-4 at the failing tile, each genome the family calls valid checked three times on
fresh random inputs by the search's own check (a race shows as a count of unwritten outputs that moves).

    python tools/probe_warp_specialize.py [M N K ...]   # default 4096 4096 4096; JSON to $EVO_OUT (or /tmp)
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

REPEATS = 3


def genomes(family: Any) -> list[dict[str, Any]]:
    """The probe's genome values: the grid of tiles and depths, then the failing tile's num_stages."""
    ws = dict(memory="descriptor", warp_specialize=True, num_warps=4, persistent=False, split_k=1)
    grid = [family.base(**ws, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, loop_stages=ls, num_stages=3)
            for bm, bn, bk, ls in itertools.product((64, 128), (32, 64, 128, 256), (32, 64), (0, 2, 3, 4))]
    grid += [family.base(**ws, BLOCK_M=64, BLOCK_N=32, BLOCK_K=32, loop_stages=ls, num_stages=s)
             for ls, s in itertools.product((0, 2), (2, 4))]
    return grid


def probe(shape: tuple[int, int, int]) -> list[dict[str, Any]]:
    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target
    from tests.gpu import search_check

    op = operators.get("gemm")
    family, target = op.family, Target.from_torch()
    problem = op.problem(shape, "bf16")
    rows = []
    for values in genomes(family):
        genome = family.make(values)
        row: dict[str, Any] = {"problem": problem.key, "text": str(genome)}
        why = family.violations(genome, problem, target)
        if why:
            rows.append({**row, "status": "invalid", "reason": why[0]})
            continue
        module = load_source(op.render(genome, problem, target))
        checks = []
        for seed in range(REPEATS):
            a, b = op.make_inputs(problem, 100 + seed, device="cuda")
            status, err, reason, _ = search_check(module.matmul, (a, b), op.reference(a, b), op.tolerance(problem))
            checks.append({"status": status, "error": err, "reason": reason[:160]})
            if status == "crashed":
                break
        statuses = {c["status"] for c in checks}
        row.update(status="correct" if statuses == {"correct"} else "/".join(sorted(statuses)), checks=checks)
        rows.append(row)
        print(row["status"], row["text"], *(c["reason"] for c in checks if c["reason"]), flush=True)
        if "crashed" in statuses:
            break
    return rows


def main(argv: list[str]) -> int:
    import torch

    dims = [int(x) for x in argv] or [4096, 4096, 4096]
    shapes = [tuple(dims[i:i + 3]) for i in range(0, len(dims), 3)]
    rows = [r for shape in shapes for r in probe(shape)]
    out = Path(os.environ.get("EVO_OUT", "/tmp")) / "probe_warp_specialize.json"
    out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    ran = [r for r in rows if r["status"] != "invalid"]
    bad = [r for r in ran if r["status"] != "correct"]
    print(f"{len(ran)} valid genomes ran ({len(rows) - len(ran)} invalid), {len(bad)} not correct on every run:")
    for r in bad:
        print(f"  {r['status']:>16s}  {r['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
