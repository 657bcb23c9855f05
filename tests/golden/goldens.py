"""Golden renderings on disk: the manifest of cases, each case's rendering, and the files that keep them.

tests/golden/files/manifest.json names every case (operator, problem, genome, schedule, where the selection found
it); each case's text is kept in files/<operator>/<shape>-<dtype>/<schedule>.py.golden, the module `evo export`
writes in .../export.py.golden. The launch runtime every rendered module carries verbatim (evo/launch/runtime.py) is
kept once, in files/_shared/launch_runtime.py.golden, and a golden holding that same text names it in one line
(RUNTIME_REFERENCE): `expand` puts it back, so a golden compares with a rendering byte for byte. So is the text of
every real module a family pastes (operators/_paste.py: a kernel file, a launch plan, a self-check), kept once in
files/_shared/<its path>.golden and named in one line by the goldens that hold it: a change to a kernel file shows
as one diff of its shared golden, and each case's golden shows what its rendering assembles around it.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from evo.problem import Problem
from tests.golden.cases import TARGET, Case

__all__ = ["FILES", "MANIFEST", "RUNTIME", "SHARED", "REGENERATE", "read_manifest", "write_manifest", "render",
           "compact", "expand", "runtime_block", "pasted_blocks", "shared_path", "kept_pasted"]

FILES = Path(__file__).resolve().parent / "files"
MANIFEST = FILES / "manifest.json"
SHARED = FILES / "_shared"
RUNTIME = SHARED / "launch_runtime.py.golden"
ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "python -m tests.golden.regenerate"
RUNTIME_REFERENCE = "# ---- (the evo launch runtime: tests/golden/files/_shared/launch_runtime.py.golden) ----\n"
_RUNTIME_START = "# ---- evo launch runtime "
_RUNTIME_END = "# ---- end of the evo launch runtime "
# the one line of an exported module that changes with the clock (and evo's version)
_EXPORTED_AT = re.compile(r"^# Exported by evo-kernels \S+ on \d{4}-\d\d-\d\d \d\d:\d\d UTC", re.MULTILINE)


@cache
def _operator(name: str) -> Any:
    import operators

    return operators.get(name)


def read_manifest() -> list[Case]:
    """The cases the goldens keep (empty before the first `regenerate --select`)."""
    if not MANIFEST.exists():
        return []
    cases = []
    for entry in json.loads(MANIFEST.read_text()):
        op = _operator(entry["operator"])
        problem = op.problem(tuple(entry["sizes"]), entry["dtype"])
        genome = op.family.from_canonical(entry["genome"])
        case = Case(entry["operator"], problem, genome, entry["schedule"], entry["origin"], entry["export"])
        if case.file != entry["file"]:
            raise ValueError(f"{MANIFEST}: entry {entry['file']!r} names the file {case.file!r} by its fields")
        cases.append(case)
    return cases


def write_manifest(cases: list[Case]) -> None:
    entries = [{"file": c.file, "operator": c.operator, "sizes": list(c.problem.sizes), "dtype": c.problem.dtype,
                "schedule": c.schedule, "origin": c.origin, "export": c.export, "genome": c.genome.canonical()}
               for c in cases]
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    MANIFEST.write_text("[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n")


def _export(case: Case, source: str) -> str:
    """The module `evo export` writes for `case` as the elite of a GPU run with fixed figures whose store kept
    `source` (a timestamp-free header: the line naming evo's version and the export's time is set to a fixed text)."""
    from evo.archive.elite import EliteKernel
    from evo.evaluate.modules import source_hash
    from evo.store.record import Evaluation
    from evo.surface.export import render_module

    p: Problem = case.problem
    ev = Evaluation(
        operator=case.operator, problem_key=p.key, problem=p.to_json(), genome=case.genome.canonical(),
        genome_hash=case.genome.hash, source_hash=source_hash(source), status="ok", gpu="NVIDIA H100 80GB HBM3",
        versions={"cuda": "12.8", "torch": "2.9.0", "triton": "3.6.0"}, median_ms=1.25, spread_ms=0.01,
        times_ms=[1.25] * 30, baseline="baseline", baseline_ms=1.5, baseline_spread_ms=0.01, call_ms=1.3,
        baseline_call_ms=1.55, host_us=12.0, baseline_host_us=9.0, objective="gpu", max_rel_error=0.001,
        origin="seed", run_id="golden-run", worker="gpu0", started_at=1.767e9, finished_at=1.767e9 + 60, id=1)
    meta = {"experiment": "golden", "executor": "local"}
    text = render_module(_operator(case.operator), EliteKernel(p, ev), meta, stored=source)
    return _EXPORTED_AT.sub("# Exported by evo-kernels <version> on <export time>", text, count=1)


def render(case: Case) -> str:
    """The case's text as evo renders it now."""
    source = _operator(case.operator).render(case.genome, case.problem, TARGET)
    return _export(case, source) if case.export else source


def runtime_block(text: str) -> str | None:
    """The launch runtime's lines in a rendered text (from its opening to its closing marker line), if it has them."""
    start = text.find(_RUNTIME_START)
    if start < 0 or (start and text[start - 1] != "\n"):
        return None
    end = text.find(_RUNTIME_END, start)
    if end < 0:
        return None
    stop = text.find("\n", end)
    return text[start: len(text) if stop < 0 else stop + 1]


def pasted_blocks() -> dict[str, str]:
    """Repository path -> the text evo pastes from it into rendered modules (operators/_paste.py), for every module of
    operators/ with the paste marker."""
    from operators._paste import MARKER, pasted_source

    out = {}
    for path in sorted((ROOT / "operators").rglob("*.py")):
        if "\n" + MARKER + "\n" in path.read_text():
            out[path.relative_to(ROOT).as_posix()] = pasted_source(path)
    return out


def shared_path(rel: str) -> Path:
    """Where the golden of a pasted file's text is kept."""
    return SHARED / f"{rel}.golden"


def kept_pasted() -> dict[str, str]:
    """Repository path -> the pasted text its shared golden keeps."""
    if not SHARED.exists():
        return {}
    return {p.relative_to(SHARED).as_posix().removesuffix(".golden"): p.read_text()
            for p in sorted(SHARED.rglob("*.py.golden")) if p != RUNTIME}


def _pasted_reference(rel: str) -> str:
    return f"# ---- (pasted verbatim from {rel}: tests/golden/files/_shared/{rel}.golden) ----\n"


def compact(text: str, runtime: str, pasted: dict[str, str] | None = None) -> str:
    """`text` as kept on disk: the `runtime` block, where it holds exactly that, as RUNTIME_REFERENCE, and each
    `pasted` text (path -> text) it holds as its one reference line."""
    if runtime and runtime_block(text) == runtime:
        text = text.replace(runtime, RUNTIME_REFERENCE, 1)
    for rel, block in (pasted or {}).items():
        if block and block in text:
            text = text.replace(block, _pasted_reference(rel), 1)
    return text


def expand(kept: str, runtime: str, pasted: dict[str, str] | None = None) -> str:
    """The rendering a kept golden stands for (RUNTIME_REFERENCE replaced by the kept runtime block, each pasted
    file's reference line by its kept text)."""
    for rel, block in (pasted or {}).items():
        kept = kept.replace(_pasted_reference(rel), block, 1)
    return kept.replace(RUNTIME_REFERENCE, runtime, 1)
