"""What an attention genome of the Triton rendering keeps and needs (genomes/attention.py): the rows its query tiles
cover, its key blocks, the fp32 values a thread keeps alive and the shared memory of its pipelined loads. The
family's rules (genomes/attention_rules.py) read these."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem

__all__ = ["ELEM_BYTES", "MAX_LIVE", "live_limit", "head_dim_pad", "group", "tile_rows", "key_blocks", "next_pow2",
           "live_values", "smem_estimate"]

ELEM_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}

# fp32 values a thread may keep alive for the output tile and one tile of scores. Compiled for sm_90 (Triton 3.9,
# head dim 128), a thread took about 1.6-2 registers per live value: 96 live took 168-186 registers, 160 took
# 252, 128 at 4 warps spilled (255); at 16 warps a thread has only 128 registers, and 96 live spilled a little.
# So at most 160, and three quarters of the registers a thread may have at that many warps.
MAX_LIVE = 160


def live_limit(num_warps: int) -> int:
    return min(MAX_LIVE, 3 * min(255, 65536 // (32 * num_warps)) // 4)


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def head_dim_pad(problem: Problem) -> int:
    """The head dimension rounded up to a power of two (at least 16): the width of the kernel's tiles."""
    return max(16, 1 << (problem.dims["head_dim"] - 1).bit_length())


def group(problem: Problem) -> int:
    """Query heads per KV head."""
    return problem.dims["heads"] // problem.dims["kv_heads"]


def tile_rows(g: Mapping[str, Any], problem: Problem) -> int:
    """Rows a head's (or, packed, a KV head's) query tiles cover: the queries, times the group when packed."""
    return problem.dims["q_len"] * (group(problem) if g["pack_gqa"] else 1)


def key_blocks(g: Mapping[str, Any], problem: Problem) -> int:
    return -(-problem.dims["kv_len"] // g["BLOCK_N"])


def live_values(g: Mapping[str, Any], problem: Problem) -> int:
    """fp32 values a thread keeps: the output tile and one tile of scores, over the program's threads."""
    return (g["BLOCK_M"] * head_dim_pad(problem) + g["BLOCK_M"] * g["BLOCK_N"]) // (32 * g["num_warps"])


def smem_estimate(g: Mapping[str, Any], problem: Problem) -> int:
    """The query tile, and num_stages buffers of a K and a V tile (one when the loads are not pipelined)."""
    e, d = ELEM_BYTES[problem.dtype], head_dim_pad(problem)
    return e * d * (g["BLOCK_M"] + 2 * g["BLOCK_N"] * max(1, g["num_stages"]))
