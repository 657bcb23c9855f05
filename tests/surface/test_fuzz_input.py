"""Property-based fuzzing of everything a user types: experiment documents and command lines.

Each generated case must end, within seconds, either as a run that would start (the search's first population,
archive and first child can be built for every problem) or as one line on stderr naming the problem with exit
status 2; never a traceback. The search itself is replaced by that dry start (a real one is covered elsewhere),
so hundreds of cases run in-process in a few seconds each. EVO_FUZZ_EXAMPLES sets the number of generated cases
per property (default 150); EVO_FUZZ_REPORT=FILE writes the counts as JSON.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

import evo.bench.command
import evo.search.run
from evo.experiment.rundir import RunDir
from evo.experiment.runlock import RunLock
from evo.search.events import RunSummary
from evo.store import Store
from evo.surface.cli import main
from tests.fixtures.run_fixture import make_run

EXAMPLES = int(os.environ.get("EVO_FUZZ_EXAMPLES", "150"))
CASE_LIMIT_S = 20  # "within seconds", with room for a loaded 2-core CI machine
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                phases=[Phase.explicit, Phase.generate, Phase.shrink],  # no explain phase: it writes patches
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])
TALLY: Counter = Counter()

BASE: dict[str, Any] = {
    "name": "fz", "operator": "gemm", "problems": {"shapes": ["64x64x64"], "dtypes": ["fp16"]},
    "genome": {"BLOCK_M": [32, 64]}, "descriptors": ["tile_area", "block_k"], "initial_random": 4,
    "mutators": {"mutate": 0.6, "crossover_uniform": 0.4}, "selection": "uniform", "transfer": True,
    "budget": {"evaluations": 10, "wall_s": 30, "stagnation": None}, "seed": 0,
    "executor": {"kind": "smoke", "gpus": 1, "compile_workers": 1, "dashboard": False, "address": None},
    "evaluation": {"reps": 1, "warmup": 0, "timeout_s": 60, "compile_timeout_s": 120, "noise_margin": 0.01},
    "output": "runs",
}
PATHS = [(k,) for k in BASE] + [(k, sub) for k, v in BASE.items() if isinstance(v, dict) for sub in v] + [
    ("problems", "shapes", 0), ("problems", "dtypes", 0), ("genome", "BLOCK_N"), ("genome", "num_warps"),
    ("descriptors", 0), ("descriptors", 1), ("unknown_key",), ("executor", "nodes")]
WORDS = ["64x64x64", "32x96x64", "4096x4096x4096", "0x64x64", "64x64", "64x64x64x64", "1e9", "-1", "bf16", "fp16",
         "fp32", "int8", "ray", "local", "smoke", "auto", "tile_area", "block_k", "structure", "smem_kib", "gemm",
         "softmax", "rmsnorm", "uniform", "curiosity", "mutate", "", " ", "\x00", "a\nb", "\x1b[31mred", "../..",
         "/dev/null", "runs", "99999x99999x99999", "2147483648x1x1", "46341x46341x64", "true", "null", "~"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.sampled_from([0, 1, 2, 10**9, 10**30]),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(WORDS), st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.sampled_from(WORDS), inner, max_size=3)),
                      max_leaves=12)


def _mutate(doc: dict[str, Any], path: tuple, value: Any, delete: bool) -> None:
    node: Any = doc
    for key in path[:-1]:
        if isinstance(node, dict) and isinstance(node.get(key), (dict, list)):
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return
    last = path[-1]
    if isinstance(node, dict):
        if delete:
            node.pop(last, None)
        else:
            node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last < len(node):
        node[last] = value


@st.composite
def documents(draw: st.DrawFn) -> str:
    """A YAML text: the valid base with a few keys changed, dropped or added, or something hostile."""
    kind = draw(st.sampled_from(["mutated"] * 6 + ["rowwise", "text", "deep", "aliases", "big", "binary"]))
    if kind in ("mutated", "rowwise"):
        doc = json.loads(json.dumps(BASE))
        if kind == "rowwise":
            doc.update(operator=draw(st.sampled_from(["softmax", "rmsnorm"])), genome={},
                       descriptors=["block", "rows"], problems={"shapes": ["64x128"], "dtypes": ["fp16"]})
        for _ in range(draw(st.integers(1, 3))):
            _mutate(doc, draw(st.sampled_from(PATHS)), draw(VALUES), draw(st.booleans()))
        return yaml.safe_dump(doc, allow_unicode=draw(st.booleans()))
    if kind == "text":
        return draw(st.text(max_size=200))
    if kind == "deep":
        n = draw(st.integers(10, 20000))
        return "operator: gemm\nproblems: " + "[" * n + "]" * n + "\n"
    if kind == "aliases":
        levels, width = draw(st.integers(2, 12)), draw(st.integers(2, 10))
        lines = ["a0: &a0 [x, x]"] + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
        return "\n".join(lines) + "\noperator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\n"
    if kind == "big":
        return "# " + "x" * draw(st.integers(1 << 19, 3 << 19)) + "\noperator: gemm\n"
    return draw(st.binary(max_size=100)).decode("latin-1")


def _dry_start(experiment: Any, run_dir: Any, resume: bool = False, on_event: Any = None, **kw: Any) -> RunSummary:
    """Everything a search builds before its first evaluation, for every problem; then an empty store."""
    import operators
    from evo.archive import GridArchive
    from evo.mutators import MutatorMix
    from evo.problem import HOPPER
    from evo.search.selection import get as get_selection
    from evo.search.variation import Variation

    with RunLock(Path(run_dir)):
        op = operators.get(experiment.operator, dict(experiment.genome))
        for problem in experiment.problems:
            archive = GridArchive.for_problem(op, problem, experiment.descriptors,
                                              experiment.evaluation.noise_margin)
            variation = Variation(op.family, problem, HOPPER, MutatorMix(experiment.mutators),
                                  get_selection(experiment.selection))
            rng = np.random.default_rng(experiment.seed)
            first = variation.initial(rng, min(experiment.initial_random, 8))
            assert first or experiment.initial_random == 0 or op.family.seeds(problem, HOPPER) == []
            variation.child(archive, {p.genome.hash for p in first}, rng)
        Store(RunDir(Path(run_dir)).store).close()
    return RunSummary(experiment.name, str(run_dir), (), False, 0, 0.0, experiment.executor.kind == "smoke")


class _Alarm(Exception):
    pass


def _invoke(argv: list[str]) -> tuple[int, str, str, float]:
    """main(argv) in this process: (exit status, stdout, stderr, seconds); a hang past the limit raises."""
    out, err = io.StringIO(), io.StringIO()

    def ring(*_: Any) -> None:
        raise _Alarm(f"evo {argv!r} ran longer than {CASE_LIMIT_S} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.alarm(CASE_LIMIT_S)
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:  # argparse: --help, --version, usage errors
                rc = e.code if isinstance(e.code, int) else 2
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return rc, out.getvalue(), err.getvalue(), time.monotonic() - t0


def _check(kind: str, argv: list[str], rc: int, err: str, seconds: float) -> None:
    TALLY[f"{kind} cases"] += 1
    assert "Traceback" not in err, f"{argv!r}: traceback\n{err}"
    assert rc in (0, 2), f"{argv!r}: exit status {rc}: {err}"
    if rc == 2:
        assert err.count("\n") == 1 and err.endswith("\n"), f"{argv!r}: not one line: {err!r}"
        assert all(ch.isprintable() for ch in err[:-1]), f"{argv!r}: control characters in {err!r}"
    assert seconds < CASE_LIMIT_S
    TALLY[f"{kind} clean"] += 1
    TALLY[f"{kind} {'accepted' if rc == 0 else 'refused'}"] += 1


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    checkout = Path(__file__).resolve().parents[2]
    before = set(os.listdir(checkout))
    root = tmp_path_factory.mktemp("fuzz")
    run = make_run(root / "runs", shapes=("64x64x64", "48x80x64"))
    corrupt = root / "corrupt"
    corrupt.mkdir()
    (corrupt / "store.sqlite").write_bytes(b"SQLite format 3\x00" + os.urandom(600))
    (root / "empty").mkdir()
    (root / "plain.txt").write_text("not yaml: [\n")
    (root / "smoke.yaml").write_text(yaml.safe_dump(BASE))
    yield {"root": root, "run": run, "corrupt": corrupt}
    if os.environ.get("EVO_FUZZ_REPORT"):
        Path(os.environ["EVO_FUZZ_REPORT"]).write_text(json.dumps(dict(sorted(TALLY.items())), indent=1) + "\n")
    assert set(os.listdir(checkout)) - before <= {".hypothesis"}, "the fuzzed commands wrote into the checkout"


@pytest.fixture(autouse=True)
def no_search(monkeypatch: pytest.MonkeyPatch, world: dict[str, Path]) -> None:
    monkeypatch.chdir(world["root"])  # relative paths (`output`, `--out genes`, `-o 48x80x64`) land in the sandbox
    monkeypatch.setattr(evo.search.run, "run_experiment", _dry_start)
    monkeypatch.setattr(evo.bench.command, "_cuda_visible", lambda: False)


@FUZZ
@given(text=documents())
@example(text="operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\ninitial_random: 1000000000\n")
@example(text="operator: gemm\nproblems: {shapes: [100000x100000x64], dtypes: [fp16]}\n")
@example(text="name: \"a\\x07b\"\noperator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\n")
@example(text="operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [bf16]}\nexecutor: {kind: smoke}\n")
@example(text="operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\noutput: plain.txt\n")
@example(text="operator: gemm\nproblems: {shapes: [64x64x64], dtypes: [fp16]}\nexecutor: {kind: smoke, gpus: 100000}\n")
def test_experiment_documents(world: dict[str, Path], text: str) -> None:
    root = world["root"]
    case = root / f"case{TALLY['documents cases']}"
    case.mkdir()
    exp = case / "exp.yaml"
    exp.write_text(text, errors="surrogateescape")
    rc, _, err, seconds = _invoke(["run", str(exp), "--out", str(case / "run")])
    _check("documents", ["run", text[:200]], rc, err, seconds)


TOKENS = ["run", "status", "export", "report", "genes", "bench", "--out", "--resume", "--allow-changes", "--shape",
          "--dtype", "--all", "-o", "--x", "--y", "--problems", "--merge", "--run", "--contenders", "--version",
          "64x64x64", "48x80x64", "1x2", "0x0x0", "fp16", "bf16", "gemm", "softmax", "tile_area", "block_k", "-", "",
          "RUN", "CORRUPT", "EMPTY", "PLAIN", "SMOKE", "MISSING", "ROOT", "NEWDIR", "RUN/store.sqlite", "\x1b[2J"]


PLAUSIBLE = {
    "run": [["SMOKE", "--out", "NEWDIR"], ["SMOKE", "--out", "RUN", "--resume"],
            ["SMOKE", "--out", "NEWDIR", "--resume"]],
    "status": [["RUN"]],
    "export": [["RUN", "--shape", "64x64x64"], ["RUN", "--all", "-o", "NEWDIR/k.py"], ["RUN", "--shape", "48x80x64",
                                                                                     "--dtype", "fp16"]],
    "report": [["RUN", "-o", "NEWDIR/r.html"], ["RUN", "--x", "block_k", "--y", "tile_area", "-o", "NEWDIR/r.html"]],
    "genes": [[], ["gemm"], ["softmax"]],
    "bench": [["SMOKE"], ["SMOKE", "--problems", "1"]],
    "frob": [[]],
}


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A plausible command line with up to two tokens replaced, inserted or dropped, or random tokens."""
    command = draw(st.sampled_from(sorted(PLAUSIBLE)))
    token = st.one_of(st.sampled_from(TOKENS), st.text(max_size=8))
    if draw(st.booleans()):
        return [command] + draw(st.lists(token, max_size=7))
    argv = [command] + list(draw(st.sampled_from(PLAUSIBLE[command])))
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(argv)))
        how = draw(st.sampled_from(["replace", "insert", "drop"]))
        if how == "insert" or i == len(argv):
            argv.insert(i, draw(token))
        elif how == "replace":
            argv[i] = draw(token)
        else:
            del argv[i]
    return argv


@FUZZ
@given(full=command_lines())
@example(full=["status", "CORRUPT"])
@example(full=["export", "PLAIN", "--shape", "64x64x64"])
@example(full=["run", "SMOKE", "--out", "PLAIN"])
@example(full=["bench", "SMOKE"])
@example(full=["report", "RUN", "-o", "ROOT"])
def test_command_lines(world: dict[str, Path], full: list[str]) -> None:
    root = world["root"]
    where = {"RUN": world["run"], "CORRUPT": world["corrupt"], "EMPTY": root / "empty", "PLAIN": root / "plain.txt",
             "SMOKE": root / "smoke.yaml", "MISSING": root / "missing", "ROOT": root,
             "NEWDIR": root / f"new{TALLY['command lines cases']}"}
    full = [str(where[t]) if t in where else
            t.replace("RUN/", f"{world['run']}/").replace("NEWDIR/", f"{where['NEWDIR']}/") for t in full]
    full = [a.replace("\x00", "") for a in full]  # a command line cannot hold NUL
    rc, _, err, seconds = _invoke(full)
    _check("command lines", full, rc, err, seconds)
