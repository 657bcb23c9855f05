"""One two-consumer (ping-pong) Gluon GEMM at a small shape, for compute-sanitizer to watch (it found nothing
wrong once the consumers took turns at the ring: operators/gemm/gluon_source.py).

    compute-sanitizer --tool memcheck python tools/gluon_pingpong_once.py [M N K]

The shape needs two tiles or more per program (e.g. 2048 2048 256 on 132 SMs) for the second consumer to run.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import torch

    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import operators
    from evo.evaluate.modules import load_source
    from genomes.gemm_gluon import GLUON_FIXED
    from operators.gemm.gluon_source import gluon_source

    family = operators.get("gemm").family
    genome = family.make(family.base(**GLUON_FIXED, backend="gluon", BLOCK_M=128, BLOCK_N=128, BLOCK_K=64,
                                     num_stages=4, num_warps=4, consumers=2))
    module = load_source(gluon_source(genome.as_dict(), "ping-pong probe"))
    m, n, k = (int(x) for x in argv[:3]) if len(argv) >= 3 else (2048, 2048, 256)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = module.matmul(a, b)
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    print("relative error", float((c.float() - ref).norm() / ref.norm()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
