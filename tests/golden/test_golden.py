"""Every golden rendering (tests/golden/files) is what evo renders now, byte for byte; every operator has some.

A renderer change that changes a kernel fails here with a short diff. If the change is meant, rewrite the goldens
(`python -m tests.golden.regenerate`) and review `git diff tests/golden/files`: that diff is what the change did.
"""

from __future__ import annotations

import difflib

import pytest

import operators
from tests.golden.cases import PROBLEMS
from tests.golden.goldens import (
    FILES,
    MANIFEST,
    REGENERATE,
    RUNTIME,
    SHARED,
    expand,
    kept_pasted,
    read_manifest,
    render,
)

CASES = read_manifest()
PASTED = kept_pasted()  # repository path -> the pasted text its shared golden keeps
DIFF_LINES = 40
MAX_BYTES = 3_000_000


def _diff(kept: str, now: str, name: str) -> str:
    lines = list(difflib.unified_diff(kept.splitlines(), now.splitlines(), f"golden/{name}", "rendered now",
                                      n=2, lineterm=""))
    more = f"\n... {len(lines) - DIFF_LINES} more diff lines" if len(lines) > DIFF_LINES else ""
    return "\n".join(lines[:DIFF_LINES]) + more


@pytest.mark.parametrize("case", CASES, ids=[c.file.removesuffix(".py.golden") for c in CASES])
def test_rendering_is_the_golden(case):
    path = FILES / case.file
    assert path.exists(), f"golden {case.file} is missing: run `{REGENERATE}`"
    kept = expand(path.read_text(), RUNTIME.read_text() if RUNTIME.exists() else "", PASTED)
    now = render(case)
    if now != kept:
        pytest.fail(f"{case.operator} {case.problem.key} ({case.schedule}{', export' if case.export else ''}) renders "
                    f"differently from its golden. If the change is meant, run `{REGENERATE}` and review "
                    f"`git diff tests/golden/files`.\n{_diff(kept, now, case.file)}", pytrace=False)


def test_every_operator_and_problem_has_goldens():
    assert MANIFEST.exists(), f"no golden manifest: run `{REGENERATE} --select`"
    covered = {c.operator for c in CASES}
    missing = [n for n in operators.names() if n not in covered]
    assert not missing, (f"operators without golden renderings: {missing}; add their problems to PROBLEMS in "
                         f"tests/golden/cases.py and run `{REGENERATE} --select {' '.join(missing)}`")
    problems = {(c.operator, c.problem.sizes, c.problem.dtype) for c in CASES}
    absent = [f"{n} {'x'.join(map(str, s))} {d}" for n, shapes in PROBLEMS.items() for s, d, _ in shapes
              if (n, tuple(s), d) not in problems]
    assert not absent, f"problems of tests/golden/cases.py without goldens: {absent}; run `{REGENERATE} --select`"


def test_every_backend_is_kept():
    backends = {(c.operator.split("+")[0], c.genome.get("backend")) for c in CASES if c.genome.get("backend")}
    assert {("gemm", "triton"), ("gemm", "gluon"), ("attention", "triton"), ("attention", "gluon")} <= backends
    assert any(c.export for c in CASES)


def test_goldens_are_the_manifests_and_small():
    on_disk = {p.relative_to(FILES).as_posix() for p in FILES.rglob("*.golden") if SHARED not in p.parents}
    named = {c.file for c in CASES}
    assert on_disk == named, (f"golden files no case names: {sorted(on_disk - named)[:5]}; run `{REGENERATE}` "
                              "to remove them")
    size = sum(p.stat().st_size for p in FILES.rglob("*") if p.is_file())
    assert size < MAX_BYTES, f"the goldens take {size / 1e6:.1f} MB (> {MAX_BYTES / 1e6:.0f} MB): keep fewer cases"
