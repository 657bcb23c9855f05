"""Rewrite the golden renderings: `python -m tests.golden.regenerate [--select [OPERATOR ...]] [--check]`.

Without options, each case of the manifest is rendered again and its golden rewritten where it differs (the genomes
stay: `git diff tests/golden/files` then shows exactly what a change to a renderer changed). `--select` first
chooses the cases afresh (tests/golden/cases.py: seeds and seeded random genomes, one per schedule), for the named
operators only when names follow (the others keep theirs): after adding an operator to cases.PROBLEMS, or changing
the selection. `--check` writes nothing and exits 1 when a golden differs. Goldens no case names are removed.
"""

from __future__ import annotations

import argparse
import sys

from tests.golden.cases import PROBLEMS, select
from tests.golden.goldens import (
    FILES,
    MANIFEST,
    RUNTIME,
    compact,
    pasted_blocks,
    read_manifest,
    render,
    runtime_block,
    shared_path,
    write_manifest,
)

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.regenerate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--select", nargs="*", metavar="OPERATOR",
                        help="choose the cases afresh (of these operators only, when named)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a golden differs")
    args = parser.parse_args(argv)
    cases = read_manifest()
    if args.select is not None:
        unknown = [n for n in args.select if n not in PROBLEMS]
        if unknown:
            print(f"regenerate: no golden problems for {', '.join(unknown)} (add them to PROBLEMS in "
                  "tests/golden/cases.py)", file=sys.stderr)
            return 2
        names = args.select or list(PROBLEMS)
        kept = [c for c in cases if c.operator not in names]
        cases = kept + select(names)
        cases.sort(key=lambda c: (list(PROBLEMS).index(c.operator) if c.operator in PROBLEMS else len(PROBLEMS),
                                  c.file))
    texts = {c.file: render(c) for c in cases}
    if len(texts) != len(cases):
        print("regenerate: two cases name one golden file", file=sys.stderr)
        return 1
    runtime = next((b for b in map(runtime_block, texts.values()) if b), "")
    pasted = {rel: block for rel, block in pasted_blocks().items() if any(block in t for t in texts.values())}
    wanted = {FILES / name: compact(text, runtime, pasted) for name, text in texts.items()}
    if runtime:
        wanted[RUNTIME] = runtime
    wanted.update({shared_path(rel): block for rel, block in pasted.items()})
    changed = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    stray = [p for p in FILES.rglob("*.golden") if p not in wanted]
    manifest_changed = args.select is not None
    if args.check:
        for path in changed + stray:
            print(f"differs: {path.relative_to(FILES)}")
        return 1 if changed or stray else 0
    for path in changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted[path])
    for path in stray:
        path.unlink()
    if manifest_changed:
        write_manifest(cases)
    size = sum(len(t.encode()) for t in wanted.values())
    print(f"{len(cases)} golden renderings ({size / 1e6:.2f} MB) in {FILES}: {len(changed)} written, "
          f"{len(stray)} removed{', manifest rewritten' if manifest_changed else ''} ({MANIFEST.name})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
