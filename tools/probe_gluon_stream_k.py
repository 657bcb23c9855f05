"""GPU probe: where the Gluon stream-K GEMM's time goes (operators/gemm/gluon_split.py).

For each problem and schedule (one consumer of 8 warps, or two row-split consumers; 128x256 tiles) it times the
plain persistent Gluon kernel, the stream-K kernel, and stream-K with parts of its fix-up cut out of the rendered
source: no fix-up at all (a shared tile is not stored), no summing reads (partials published and counted only), no
publishing (counted and read only). The cut variants compute wrong outputs on purpose: they are timed, and their
`correct` column says so. do_bench medians beside cuBLAS, one process on one GPU.

    python tools/probe_gluon_stream_k.py OUT.json
"""

from __future__ import annotations

import json
import sys

CUTS = {  # variant -> (old, new) edits of the rendered stream-K module
    "sk": [],
    "sk_nofixup": [("            if k_hi - k_lo < k_tiles:\n                acc, store",
                    "            if k_hi - k_lo < 0:\n                acc, store")],
    "sk_noread": [("    if last:\n        # .cg", "    if last and k_tiles < 0:\n        # .cg")],
    "sk_nopublish": [("    gl.store(slots + (gl.program_id(0) - first)",
                      "    if k_tiles < 0:\n        gl.store(slots + (gl.program_id(0) - first)")],
}
BASE = {"backend": "gluon", "memory": "host_descriptor", "persistent": True, "BLOCK_K": 64}
SCHEDULES = {"coop128x256": dict(BLOCK_M=128, BLOCK_N=256, num_stages=3, num_warps=8),
             "rows128x256": dict(BLOCK_M=128, BLOCK_N=256, num_stages=3, num_warps=4, consumers=2,
                                 consumer_split="rows")}
SHAPES = ((777, 4096, 4096), (1000, 3000, 2000), (1152, 4352, 4096), (768, 768, 49152), (4096, 4096, 4096))


def main(out: str) -> None:
    import numpy as np
    import torch
    import triton

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    op, target = operators.get("gemm"), Target.from_torch()
    family, rows = op.family, []
    for shape in SHAPES:
        problem = op.problem(shape, "bf16")
        a, b = op.make_inputs(problem, 0, device="cuda")
        ref = op.reference(a, b).float()
        cublas_ms = triton.testing.do_bench(lambda a=a, b=b: torch.matmul(a, b), return_mode="median")
        for name, values in SCHEDULES.items():
            for variant in ["dp", *CUTS]:
                raw = family.make(family.base(**BASE, **values, stream_k=variant != "dp"))
                genome = family.repair(raw, problem, target, np.random.default_rng(0))
                source = op.render(genome, problem, target)
                for old, new in CUTS.get(variant, []):
                    if old not in source:  # the kernel (operators/gemm/gluon_kernel.py) changed: fix the cut
                        raise SystemExit(f"probe: the cut {variant} finds no {old!r} in the rendered module")
                    source = source.replace(old, new)
                module = load_source(source)
                c = module.matmul(a, b)
                correct = bool(torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2))
                ms = triton.testing.do_bench(lambda m=module, a=a, b=b: m.matmul(a, b), return_mode="median")
                rows.append(dict(shape="x".join(map(str, shape)), schedule=name, variant=variant, ms=ms,
                                 cublas_ms=cublas_ms, vs_cublas=cublas_ms / ms, correct=correct, genome=str(genome)))
                print(f"{rows[-1]['shape']:18s} {name:12s} {variant:13s} {ms * 1e3:8.1f} us  "
                      f"{cublas_ms / ms:5.2f}x cuBLAS  correct={correct}", flush=True)
    with open(out, "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/probe_gluon_stream_k.json")
