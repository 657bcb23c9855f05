"""The rope_cache genome: rotary embedding of the new tokens' query and key heads and their KV-cache write, one launch
(operators/rope_cache).

A program takes BLOCK_T tokens x BLOCK_H heads and walks each half of the head dimension in BLOCK_D-wide steps;
`roles` says whether a program's heads are a flat range over a token's query, key and value heads (the role decided
per head) or of one role only (the role decided once per program, value heads never reading the tables). The work is
tiny at decode (a few tens of kilobytes at T = 1: launch latency and parallelism decide) and memory-bound in prefill.

Validity is one table of rules, each a check and its fix (`RULES`), read by both `violations` and `repair`: a block no
larger than what it tiles (tokens, heads, half head rounded up to a power of two), a tile of at most 16 elements per
thread (about 6 fp32 values live per element: two halves in, two tables, two out) and, above one warp, no fewer
elements than threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evo.problem import Problem, Target
from genomes import labels
from genomes.base import Descriptor, Genome, GenomeFamily
from genomes.genes import Categorical, Gene, IntChoice, PowerOfTwo

__all__ = ["RopeCacheFamily", "RULES", "Rule", "Facts", "MAX_PER_THREAD"]

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

    def head_span(self, g: dict[str, Any]) -> int:
        """Heads one program's block ranges over: every head of a token, or the largest role's."""
        return self.heads + 2 * self.kv_heads if g["roles"] == "mixed" else max(self.heads, self.kv_heads)


def tile(g: dict[str, Any], f: Facts) -> int:
    """Elements of one [BLOCK_T, BLOCK_H, BLOCK_D] step (the launcher narrows BLOCK_D to the half head)."""
    return g["BLOCK_T"] * g["BLOCK_H"] * min(g["BLOCK_D"], f.half_pad)


@dataclass(frozen=True)
class Rule:
    """A validity rule: `check` returns the reason a genome breaks it (None if it does not); `fix` moves the genes one
    step towards keeping it and returns False when it cannot."""

    name: str
    check: Callable[[dict[str, Any], Facts], str | None]
    fix: Callable[[GenomeFamily, dict[str, Any], Facts], bool]


def _narrow_block_d(fam: GenomeFamily, g: dict[str, Any], f: Facts) -> bool:
    return fam._step_down(g, "BLOCK_D")


def _relieve_registers(fam: GenomeFamily, g: dict[str, Any], f: Facts) -> bool:
    """More warps, else halve the largest of the three blocks."""
    if fam._step_up(g, "num_warps"):
        return True
    sizes = {"BLOCK_D": min(g["BLOCK_D"], f.half_pad), "BLOCK_H": g["BLOCK_H"], "BLOCK_T": g["BLOCK_T"]}
    return any(fam._step_down(g, name) for name in sorted(sizes, key=lambda n: -sizes[n]))


RULES: tuple[Rule, ...] = (
    Rule("block_d",
         lambda g, f: None if g["BLOCK_D"] <= max(f.half_pad, 8) else
         f"BLOCK_D={g['BLOCK_D']} is wider than half the head dimension ({f.half_pad} rounded up)",
         _narrow_block_d),
    Rule("block_t",
         lambda g, f: None if g["BLOCK_T"] <= _pow2(f.tokens) else
         f"BLOCK_T={g['BLOCK_T']} exceeds the {f.tokens} tokens rounded up to a power of two",
         lambda fam, g, f: fam._step_down(g, "BLOCK_T")),
    Rule("block_h",
         lambda g, f: None if g["BLOCK_H"] <= _pow2(f.head_span(g)) else
         f"BLOCK_H={g['BLOCK_H']} exceeds the {f.head_span(g)} heads a program's block ranges over "
         f"({g['roles']} roles) rounded up to a power of two",
         lambda fam, g, f: fam._step_down(g, "BLOCK_H")),
    Rule("registers",
         lambda g, f: None if tile(g, f) <= MAX_PER_THREAD * 32 * g["num_warps"] else
         f"a {g['BLOCK_T']}x{g['BLOCK_H']}x{min(g['BLOCK_D'], f.half_pad)} tile is more than {MAX_PER_THREAD} "
         f"elements per thread at {g['num_warps']} warps",
         _relieve_registers),
    Rule("threads",
         lambda g, f: None if g["num_warps"] == 1 or tile(g, f) >= 32 * g["num_warps"] else
         f"a {tile(g, f)}-element tile has fewer elements than the {32 * g['num_warps']} threads of "
         f"{g['num_warps']} warps",
         lambda fam, g, f: fam._step_down(g, "num_warps")),
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
        g, f = genome.as_dict(), Facts.of(problem)
        return [reason for rule in RULES if (reason := rule.check(g, f)) is not None]

    def repair(self, genome: Genome, problem: Problem, target: Target, rng: np.random.Generator) -> Genome:
        """Each broken rule's fix in table order, repeated until none is broken or no fix moves a gene."""
        g, f = genome.as_dict(), Facts.of(problem)
        for _ in range(64):  # each fix moves a gene one step along a finite domain
            moved = False
            for rule in RULES:
                if rule.check(g, f) is not None and rule.fix(self, g, f):
                    moved = True
            if not moved:
                break
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
