"""Compile the goldens of a git revision and today's renderings of the same cases for sm_90 on this CPU, and compare
what the compiler reports for each: status, registers, spills and shared memory (evo.evaluate.compiler, Triton's own
ahead-of-time path; the renderer's proof that a rewrite kept the kernels):

    python -m tests.golden.compare_compiles REV [--select OPERATOR ...] [--match TEXT]

REV names the commit whose goldens stand for the old renderings (e.g. the one before a rewrite); exports are skipped
(their kernels are the seed cases'). Prints one line per case and exits 1 when any case differs or fails to render.
Run it in a process that has not run the Triton interpreter (TRITON_INTERPRET unset).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

__all__ = ["main", "compare"]

GOLDENS = "tests/golden/files"


def _git_show(rev: str, path: str) -> str:
    return subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout


def _figures(result: Any) -> tuple[Any, ...]:
    r = result.resources or {}
    return result.status, r.get("registers"), r.get("spills"), r.get("shared")


def _pasted_at(rev: str) -> dict[str, str]:
    """Repository path -> the pasted text REV's shared goldens keep (none before they were kept apart)."""
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, f"{GOLDENS}/_shared"],
                            capture_output=True, text=True).stdout.split()
    prefix = f"{GOLDENS}/_shared/"
    return {name[len(prefix):].removesuffix(".golden"): _git_show(rev, name) for name in listed
            if name.endswith(".py.golden") and not name.endswith("/launch_runtime.py.golden")}


def compare(rev: str, select: list[str], match: str = "") -> list[dict[str, Any]]:
    """One row per golden case of REV (operators in `select`, all when empty; files containing `match`): the file and
    the (status, registers, spills, shared) of its old and new rendering; `new` is None where it no longer renders."""
    import operators
    from evo.evaluate.candidate import Candidate
    from evo.evaluate.compiler import compile_candidate
    from tests.golden.cases import TARGET
    from tests.golden.goldens import expand

    runtime = _git_show(rev, f"{GOLDENS}/_shared/launch_runtime.py.golden")
    pasted = _pasted_at(rev)
    rows = []
    for entry in json.loads(_git_show(rev, f"{GOLDENS}/manifest.json")):
        if entry["export"] or (select and entry["operator"] not in select) or match not in entry["file"]:
            continue
        op = operators.get(entry["operator"])
        problem = op.problem(tuple(entry["sizes"]), entry["dtype"])
        genome = op.family.from_canonical(entry["genome"])
        old = expand(_git_show(rev, f"{GOLDENS}/{entry['file']}"), runtime, pasted)
        row: dict[str, Any] = {"file": entry["file"], "old": _figures(compile_candidate(
            Candidate(problem, genome, op, source=old), TARGET)), "new": None}
        try:
            new = op.render(genome, problem, TARGET)
        except Exception as exc:  # the genome is no longer valid, or the renderer fails: reported, not raised
            row["error"] = f"{type(exc).__name__}: {exc}"
        else:
            row["new"] = _figures(compile_candidate(Candidate(problem, genome, op, source=new), TARGET))
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.compare_compiles",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision whose goldens are the old renderings")
    parser.add_argument("--select", nargs="*", default=[], metavar="OPERATOR", help="these operators only")
    parser.add_argument("--match", default="", help="only the golden files whose path contains this text")
    args = parser.parse_args(argv)
    try:
        rows = compare(args.rev, args.select, args.match)
    except subprocess.CalledProcessError as exc:
        print(f"compare_compiles: git cannot show the goldens of {args.rev!r}: {exc.stderr.strip()}", file=sys.stderr)
        return 2
    differ = 0
    for row in rows:
        same = row["new"] == row["old"]
        differ += not same
        print(f"{'same' if same else 'DIFFERS'}  {row['file']}  old={row['old']}  new={row.get('error') or row['new']}")
    print(f"{len(rows)} cases: {len(rows) - differ} compile alike (status, registers, spills, shared), {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
