"""Spreading one row over several programs (genes `split` and `split_mode` of the row-wise family).

With split = S > 1, each row is cut into S chunks of CHUNK columns (ceil(N / S) rounded up to a multiple of
CHUNK_ALIGN, so that every chunk starts on a 128-byte line of 16-bit values) and S programs work on one row:
the shape that fills the GPU when there are few rows (1-16 rows of a 32k-256k vocabulary leave all but a few SMs
idle at one program per row) and that keeps each program's share of a very wide row small.

  two_launch   launch 1: each program computes its chunk's partial statistics (softmax: chunk max and sum of
               exp(x - chunk max); RMSNorm: sum of squares) into a small fp32 workspace [M, parts, S]; launch 2:
               each program combines the row's S partials (S is small) and writes its chunk of the output.
               x is read twice (the second read may hit L2), nothing waits on anything.
  cooperative  one launch: programs hold their chunk in registers, publish their partials, wait until every
               chunk of the row has arrived (an arrival counter), then write from registers: x is read once.
               Valid only when all S programs of a row can be resident at once: S <= the target's SMs (one
               program per SM always fits when the kernel compiles at all); the launcher caps its grid at what
               fits (evo/launch/runtime.py, resident_programs) and a program that waits too long computes the
               row's statistics itself (operators/rowwise_split.py says why no wait can hang).

The chunk is one BLOCK-wide tile in single mode (BLOCK >= CHUNK) or a loop of BLOCK-wide steps (looped); a
cooperative kernel is single by construction (its chunk stays in registers). A split kernel handles one row per
program group (ROWS = 1) on its own grid (persistent = 0). split = 1 is the one-program-per-row kernels, where
split_mode means nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evo.problem import Problem, Target
from genomes.base import GenomeFamily
from genomes.rule_table import Fix, Rule

__all__ = ["CHUNK_ALIGN", "chunk_width", "SPLIT_RULES", "SPLIT_PLAN", "sensible_splits", "split_seeds"]

CHUNK_ALIGN = 64  # columns: a chunk of 16-bit values starts on a 128-byte line


def chunk_width(n_cols: int, split: int) -> int:
    """Columns per chunk of a row of `n_cols` split `split` ways (the whole row when split is 1). The rendered
    launcher computes the same: cdiv(cdiv(N, SPLIT), 64) * 64."""
    if split == 1:
        return n_cols
    per_program = -(-n_cols // split)
    return -(-per_program // CHUNK_ALIGN) * CHUNK_ALIGN


def _rows(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    s = g["split"]
    return f"split={s} spreads one row over {s} programs: ROWS must be 1 (got {g['ROWS']})" \
        if s > 1 and g["ROWS"] != 1 else None


def _persistent(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    s = g["split"]
    return f"split={s} launches one program per chunk (or its own resident grid): persistent must be 0" \
        if s > 1 and g["persistent"] else None


def _single(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    if g["split"] > 1 and g["split_mode"] == "cooperative" and g["mode"] != "single":
        return "a cooperative split keeps its chunk in registers: mode must be single"
    return None


def _resident(g: Mapping[str, Any], p: Problem, t: Target) -> str | None:
    s = g["split"]
    if s > 1 and g["split_mode"] == "cooperative" and s > t.num_sms:
        return (f"a cooperative split={s} needs {s} programs resident at once: more than the {t.num_sms} SMs of "
                f"{t.name}")
    return None


def _one_row_or_no_split(gene: str, value: Any) -> Fix:
    def fix(fam: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
        if not fam._set(g, gene, value):
            fam._set(g, "split", 1)
        return False
    return fix


def _single_or_two_launches(fam: Any, g: dict[str, Any], p: Problem, t: Target) -> bool:
    if not fam._set(g, "mode", "single"):
        fam._set(g, "split_mode", "two_launch")
    return False


# The split genes' own rules (the block covering the chunk is the family's single-pass rule), in the order violations
# report them: a split program handles one row on its own grid; a cooperative split is single pass, no wider than
# the SMs (a narrower split, else two launches). `split_resident_fallback` is the last look repair takes at the SMs,
# after the mode (not reported twice).
SPLIT_RULES = (
    Rule("split_rows", _rows, _one_row_or_no_split("ROWS", 1)),
    Rule("split_persistent", _persistent, _one_row_or_no_split("persistent", 0)),
    Rule("split_single", _single, _single_or_two_launches),
    Rule("split_resident", _resident, lambda fam, g, p, t: fam._step_down(g, "split")),
    Rule("split_resident_fallback", _resident, lambda fam, g, p, t: fam._set(g, "split_mode", "two_launch") and False,
         hard=False),
)
SPLIT_PLAN = ("split_rows", "split_persistent", "split_resident", "split_single", "split_resident_fallback")


def sensible_splits(family: GenomeFamily, problem: Problem, target: Target) -> list[int]:
    """The splits a random draw picks among: 1, and those that keep the grid within a few waves of programs
    (rows x split <= 8 per SM) with chunks of at least 256 columns; every other split is valid but wasteful."""
    m, n = problem.dims["rows"], problem.dims["cols"]
    values = family.genes["split"].values
    good = [s for s in values if s == 1 or (m * s <= 8 * target.num_sms and n >= 256 * s)]
    return good or list(values)


def split_seeds(family: GenomeFamily, problem: Problem, target: Target) -> list[dict[str, Any]]:
    """Raw split seeds for problems with fewer rows than SMs: enough programs per row to fill the SMs once
    or twice, in both modes, single pass with the narrowest covering block."""
    m, n = problem.dims["rows"], problem.dims["cols"]
    raw = _wide_row_seeds(family, n, target) if n > WIDE_ROW else []
    if m >= target.num_sms or n < 512:
        return raw
    for fill in (1, 2):
        s = max(2, min(64, 1 << max(0, (fill * target.num_sms // m).bit_length() - 1)))
        while s > 2 and n < 256 * s:
            s //= 2
        block = max(16, 1 << (chunk_width(n, s) - 1).bit_length())
        warps = 4 if block <= 2048 else 8 if block <= 8192 else 16
        for mode in ("two_launch", "cooperative"):
            raw.append(family.base(BLOCK=block, num_warps=warps, split=s, split_mode=mode))
    return raw


# A row wider than this many elements is read twice by one program (looped) or split; see _wide_row_seeds.
WIDE_ROW = 32768


def _wide_row_seeds(family: GenomeFamily, n: int, target: Target) -> list[dict[str, Any]]:
    """Cooperative seeds for rows too wide for one program's registers, whatever the row count: chunks of 4096
    to 16384 columns held on chip, so the row is read from memory once; num_stages = 2 loads the next row's chunk
    while the partners of this one arrive (operators/rowwise_split.py)."""
    raw = []
    for chunk in (4096, 8192, 16384):
        s = 1 << max(1, (n // chunk).bit_length() - 1)
        if s > min(64, target.num_sms):
            continue
        block = 1 << (chunk_width(n, s) - 1).bit_length()
        for stages in (1, 2):
            raw.append(family.base(BLOCK=block, num_warps=8 if block <= 8192 else 16, split=s,
                                   split_mode="cooperative", num_stages=stages))
    return raw
