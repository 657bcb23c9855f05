"""The rope_cache genome: rotary embedding of the new tokens' query and key heads and their KV-cache write, one launch
(operators/rope_cache).

A program takes BLOCK_T tokens x BLOCK_H heads and walks each half of the head dimension in BLOCK_D-wide steps;
`roles` says whether a program's heads are a flat range over a token's query, key and value heads (the role decided
per head) or of one role only (the role decided once per program, value heads never reading the tables). The work is
tiny at decode (a few tens of kilobytes at T = 1: launch latency and parallelism decide) and memory-bound in prefill.

Validity is one table of rules (genomes/rule_table.py), each a check and its fix (`RULES`), read by both `violations`
and `repair`: a block no
larger than what it tiles (tokens, heads, half head rounded up to a power of two), a tile of at most 16 elements per
thread (about 6 fp32 values live per element: two halves in, two tables, two out) and, above one warp, no fewer
elements than threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Categorical, Gene, IntChoice, PowerOfTwo
from genomes.rule_table import Rule, table_repair, table_violations

__all__ = ["RopeCacheFamily", "RULES", "Facts", "MAX_PER_THREAD", "tile"]

MAX_PER_THREAD = 16  # tile elements per thread: ~6 fp32 values live each, ~100 registers


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class Facts:
    """What the rules read from a problem."""

    tokens: int
    heads: int
    kv_heads: int
    half_pad: int  # half the head dimension, rounded up to a power of two

    @classmethod
    def of(cls, problem: Problem) -> Facts:
        d = problem.dims
        return cls(d["tokens"], d["heads"], d["kv_heads"], _pow2(d["head_dim"] // 2))

    def head_span(self, g: Mapping[str, Any]) -> int:
        """Heads one program's block ranges over: every head of a token, or the largest role's."""
        return self.heads + 2 * self.kv_heads if g["roles"] == "mixed" else max(self.heads, self.kv_heads)


def tile(g: Mapping[str, Any], f: Facts) -> int:
    """Elements of one [BLOCK_T, BLOCK_H, BLOCK_D] step (the launcher narrows BLOCK_D to the half head)."""
    return g["BLOCK_T"] * g["BLOCK_H"] * min(g["BLOCK_D"], f.half_pad)


def _relieve_registers(fam: GenomeFamily, g: dict[str, Any], p: Problem, t: Target) -> bool:
    """More warps, else halve the largest of the three blocks."""
    if fam._step_up(g, "num_warps"):
        return True
    sizes = {"BLOCK_D": min(g["BLOCK_D"], Facts.of(p).half_pad), "BLOCK_H": g["BLOCK_H"], "BLOCK_T": g["BLOCK_T"]}
    return any(fam._step_down(g, name) for name in sorted(sizes, key=lambda n: -sizes[n]))


def _block_d(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    half = Facts.of(p).half_pad
    if g["BLOCK_D"] <= max(half, 8):
        return None
    return f"BLOCK_D={g['BLOCK_D']} is wider than half the head dimension ({half} rounded up)"


def _block_t(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    tokens = Facts.of(p).tokens
    if g["BLOCK_T"] <= _pow2(tokens):
        return None
    return f"BLOCK_T={g['BLOCK_T']} exceeds the {tokens} tokens rounded up to a power of two"


def _block_h(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    span = Facts.of(p).head_span(g)
    if g["BLOCK_H"] <= _pow2(span):
        return None
    return (f"BLOCK_H={g['BLOCK_H']} exceeds the {span} heads a program's block ranges over ({g['roles']} roles) "
            "rounded up to a power of two")


def _registers(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    f = Facts.of(p)
    if tile(g, f) <= MAX_PER_THREAD * 32 * g["num_warps"]:
        return None
    return (f"a {g['BLOCK_T']}x{g['BLOCK_H']}x{min(g['BLOCK_D'], f.half_pad)} tile is more than {MAX_PER_THREAD} "
            f"elements per thread at {g['num_warps']} warps")


def _threads(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    n = tile(g, Facts.of(p))
    if g["num_warps"] == 1 or n >= 32 * g["num_warps"]:
        return None
    return f"a {n}-element tile has fewer elements than the {32 * g['num_warps']} threads of {g['num_warps']} warps"


RULES: tuple[Rule, ...] = (
    Rule("block_d", _block_d, lambda fam, g, p, t: fam._step_down(g, "BLOCK_D")),
    Rule("block_t", _block_t, lambda fam, g, p, t: fam._step_down(g, "BLOCK_T")),
    Rule("block_h", _block_h, lambda fam, g, p, t: fam._step_down(g, "BLOCK_H")),
    Rule("registers", _registers, _relieve_registers),
    Rule("threads", _threads, lambda fam, g, p, t: fam._step_down(g, "num_warps")),
)


class RopeCacheFamily(GenomeFamily):
    name = "rope_cache"

    def _genes(self) -> list[Gene]:
        return [
            PowerOfTwo("BLOCK_T", 1, 64, group="tile", doc="tokens per program"),
            PowerOfTwo("BLOCK_H", 1, 64, group="tile", doc="heads per program"),
            PowerOfTwo("BLOCK_D", 8, 128, group="tile", doc="columns of each half head per step"),
            Categorical("roles", ("mixed", "split"), group="structure",
                        doc="a program's heads: a flat range over query, key and value heads (mixed), or heads of "
                            "one role only, the role decided once per program (split)"),
            IntChoice("num_warps", (1, 2, 4, 8), group="launch", doc="warps per program"),
            Categorical("evict_qkv", ("none", "evict_first"), group="cache",
                        doc="eviction hint on the loads of qkv (read once)"),
        ]

    def violations(self, genome: Genome, problem: Problem, target: Target) -> list[str]:
        return table_violations(RULES, genome.as_dict(), problem, target)

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        """The rules' fixes in table order (genomes/rule_table.py)."""
        g = table_repair(self, RULES, genome.as_dict(), problem, target)
        return self._repaired(g, genome, problem, target)

    def base(self, **values: Any) -> dict[str, Any]:
        g = {"BLOCK_T": 1, "BLOCK_H": 4, "BLOCK_D": 64, "roles": "mixed", "num_warps": 2, "evict_qkv": "none"}
        g.update(values)
        return g

    def seeds(self, problem: Problem, target: Target) -> list[Genome]:
        f = Facts.of(problem)
        half, tokens = f.half_pad, _pow2(f.tokens)
        decode = [  # decode (T = 1..16): latency; many small programs, or one per token
            self.base(BLOCK_H=1, BLOCK_D=half, num_warps=1),
            self.base(BLOCK_H=2, BLOCK_D=half, num_warps=2),
            self.base(BLOCK_H=4, BLOCK_D=half, num_warps=4),
            self.base(BLOCK_H=8, BLOCK_D=half, num_warps=4, roles="split"),
            self.base(BLOCK_T=min(tokens, 16), BLOCK_H=4, BLOCK_D=half, num_warps=4),
            self.base(BLOCK_H=_pow2(f.heads + 2 * f.kv_heads), BLOCK_D=half, num_warps=8),
        ]
        prefill = [  # prefill (T in the thousands): bandwidth; a few KiB per program
            self.base(BLOCK_T=t, BLOCK_H=h, BLOCK_D=half, num_warps=w, roles=r, evict_qkv=e)
            for t, h, w, r, e in ((1, 8, 4, "mixed", "none"), (2, 8, 4, "mixed", "evict_first"),
                                  (4, 4, 4, "mixed", "none"), (4, 8, 8, "split", "evict_first"),
                                  (8, 4, 8, "mixed", "evict_first"), (2, 16, 8, "split", "none"))
        ]
        # a search cut short by its wall clock evaluates the first seeds: those of the problem's kind lead
        raw = decode + prefill if f.tokens <= 16 else prefill + decode
        return self._repaired_seeds(raw, problem, target)

    def descriptors(self) -> dict[str, Descriptor]:
        log2 = lambda x: float(np.log2(x))
        return {
            "tile": Descriptor("tile", lambda g, r: log2(g["BLOCK_T"] * g["BLOCK_H"] * g["BLOCK_D"]),
                               tuple(float(x) for x in range(3, 13)), "log2(tokens x heads x columns per step)",
                               label=labels.power_of_two),
            "tokens": Descriptor("tokens", lambda g, r: log2(g["BLOCK_T"]), tuple(float(x) for x in range(7)),
                                 "log2(tokens per program)", label=labels.power_of_two),
            "heads": Descriptor("heads", lambda g, r: log2(g["BLOCK_H"]), tuple(float(x) for x in range(7)),
                                "log2(heads per program)", label=labels.power_of_two),
            "roles": Descriptor("roles", lambda g, r: float(g["roles"] == "split"), (0.0, 1.0),
                                "0 mixed heads per program, 1 one role per program",
                                label=labels.categories(("mixed", "split"))),
            "num_warps": Descriptor("num_warps", lambda g, r: log2(g["num_warps"]), tuple(float(x) for x in range(4)),
                                    "log2(warps)", label=labels.power_of_two),
        }
