"""The seeded sample of GEMM genomes that the CPU (interpreter) and GPU tests both check.

Random genomes are drawn raw (every gene uniform over its domain) and repaired for each problem they run,
so the CPU tests see them shrunk to tiny shapes and the GPU test sees them at full size. Targeted genomes,
each with the CPU problem it runs on, make sure that every value of every gene is exercised.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evo.problem import HOPPER, Problem, Target
from genomes.base import Genome, InvalidGenome
from genomes.gemm import GemmFamily

SAMPLE_SEED = 2026
N_RANDOM = 50

# CPU problems: ragged (no tile divides M, N or K; no descriptors) and aligned (16-byte rows: descriptors;
# N and K are multiples of 8 but not of 16, so pointer kernels state the alignment: ROW_ALIGN)
RAGGED = (67, 45, 93)
ALIGNED = (67, 40, 88)

# (gene values over GemmFamily.base(), shape) for values the shrunken random sample cannot reach
TARGETED: list[tuple[dict[str, Any], tuple[int, int, int]]] = [
    (dict(BLOCK_M=256, BLOCK_N=64, BLOCK_K=32, num_warps=8, GROUP_M=4, raster="col"), (264, 80, 96)),
    (dict(BLOCK_M=32, BLOCK_N=256, BLOCK_K=32, memory="descriptor", epilogue_subtile=True), (67, 264, 96)),
    (dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, persistent=True, GROUP_M=16), (67, 136, 96)),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=256, num_warps=2, num_stages=2), (67, 48, 272)),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, split_k=16, GROUP_M=1, loop_unroll=4), (40, 48, 272)),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, split_k=8, memory="descriptor", loop_stages=4), (40, 48, 272)),
    (dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, memory="descriptor", warp_specialize=True, loop_stages=2), ALIGNED),
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, memory="descriptor", persistent=True, num_stages=5), ALIGNED),
    (dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, split_k=2, epilogue_subtile=True, loop_stages=3), RAGGED),
    # host tensor descriptors on ragged tiles of 16-byte rows: persistent with a subtiled epilogue, and split-K
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor", persistent=True, epilogue_subtile=True,
          raster="col"), ALIGNED),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, memory="host_descriptor", split_k=4, loop_unroll=2, GROUP_M=4),
     (40, 48, 272)),
    # stream-K: tiles shared by up to SK_MAX_PARTS programs (17 K steps), a subtiled TMA epilogue, fewer tiles
    # than programs
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, persistent=True, stream_k=True, raster="col"), (40, 48, 272)),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, memory="host_descriptor", persistent=True, stream_k=True,
          epilogue_subtile=True), ALIGNED),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, memory="descriptor", persistent=True, stream_k=True,
          loop_stages=3), (16, 64, 512)),
    # split-K into a number of parts that is not a power of two (17 K steps: uneven parts)
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, split_k=3), (40, 48, 272)),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, split_k=6, memory="descriptor"), (40, 48, 272)),
    (dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=16, split_k=12, memory="host_descriptor"), (40, 48, 272)),
    # tens of splits (long K over few tiles), summed in two levels: every memory path, uneven K ranges, a ragged
    # K tail (pointers), a subtiled epilogue
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, split_k=24), (40, 48, 400)),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, split_k=32, memory="descriptor"), (16, 64, 528)),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, split_k=48, memory="host_descriptor"), (32, 40, 784)),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, split_k=64, epilogue_subtile=True), (16, 45, 1100)),
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, split_k=96, raster="col"), (20, 16, 1600)),
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, split_k=128, memory="descriptor"), (16, 32, 4096)),
    # wide tiles (two column blocks: 64 + 32, 128 + 64) on every memory path, persistent or not
    (dict(BLOCK_M=32, BLOCK_N=96, BLOCK_K=32, persistent=True, loop_unroll=2), (67, 200, 93)),
    (dict(BLOCK_M=16, BLOCK_N=96, BLOCK_K=32, memory="descriptor"), (67, 200, 88)),
    (dict(BLOCK_M=32, BLOCK_N=192, BLOCK_K=16, memory="host_descriptor", persistent=True), (40, 200, 88)),
    # 256 + 64 columns: pointer loads past N (ragged), and host descriptors
    (dict(BLOCK_M=16, BLOCK_N=320, BLOCK_K=32, num_warps=8), (40, 700, 93)),
    (dict(BLOCK_M=16, BLOCK_N=320, BLOCK_K=32, memory="host_descriptor", persistent=True), (20, 680, 88)),
    # padded rows: K and N unaligned (A and B copied, C stored by pointers, wide), K alone (C by descriptor)
    (dict(BLOCK_M=32, BLOCK_N=192, BLOCK_K=32, memory="host_descriptor", pad_rows=True), (67, 201, 93)),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor", pad_rows=True, persistent=True,
          epilogue_subtile=True), (67, 40, 93)),
]


def raw_random(family: GemmFamily, n: int = N_RANDOM, seed: int = SAMPLE_SEED) -> list[Genome]:
    """`n` genomes with every gene drawn uniformly from its domain (not yet valid for any problem)."""
    rng = np.random.default_rng(seed)
    return [family.make({name: gene.random(rng) for name, gene in family.genes.items()}) for _ in range(n)]


def raw_targeted(family: GemmFamily) -> list[Genome]:
    return [family.make(family.base(**values)) for values, _ in TARGETED]


def raw_sample(family: GemmFamily) -> list[Genome]:
    """The whole sample, unrepaired: what the GPU test repairs for its large problems."""
    return raw_random(family) + raw_targeted(family)


def repaired(family: GemmFamily, genome: Genome, problem: Problem, target: Target = HOPPER) -> Genome | None:
    """`genome` repaired for `problem` (a fixed rng: repair consults it only on ties), None if impossible."""
    try:
        return family.repair(genome, problem, target, np.random.default_rng(0))
    except InvalidGenome:
        return None


def cpu_cases(family: GemmFamily, dtype: str) -> list[tuple[str, Genome, Problem]]:
    """(id, repaired genome, problem) for every CPU check in `dtype`: each random genome on the ragged and
    the aligned problem, each targeted genome on its own problem. Repeated (genome, problem) pairs are dropped,
    and so are Gluon renderings (the interpreter runs no Gluon: the GPU sample checks them, and
    tests/operators/gemm/test_gluon_render.py compiles them for sm_90)."""
    out: dict[tuple[str, str], tuple[str, Genome, Problem]] = {}
    randoms = raw_random(family)
    for shape in (RAGGED, ALIGNED):
        problem = Problem.make("gemm", ("M", "N", "K"), shape, dtype)
        for i, raw in enumerate(randoms):
            genome = repaired(family, raw, problem)
            if genome is not None and genome["backend"] == "gluon" and shape == RAGGED:
                # (the ragged problem's draws were all Triton's before Gluon took padded rows: keep them so)
                genome = repaired(family, raw.replace(backend="triton"), problem)
            if genome is not None and genome["backend"] == "triton":  # Gluon runs on sm_90 GPUs only
                out.setdefault((genome.hash, problem.key), (f"r{i:02d}-{problem.shape_text}-{dtype}", genome, problem))
    for i, (raw, (_, shape)) in enumerate(zip(raw_targeted(family), TARGETED, strict=True)):
        problem = Problem.make("gemm", ("M", "N", "K"), shape, dtype)
        genome = repaired(family, raw, problem)
        if genome is None:
            raise ValueError(f"targeted genome {i} ({raw}) cannot be repaired for {problem.key}")
        out.setdefault((genome.hash, problem.key), (f"t{i:02d}-{problem.shape_text}-{dtype}", genome, problem))
    return list(out.values())
