"""rmsnorm+residual's export self-check (operators/add_rmsnorm/selfcheck.py): an exported module checks its two
outputs (y, h) and runs as a script; a zoo's baseline fallback fills a tuple `out=`. Before it, a zoo module with an
add_norm role ended `python <model>_kernels.py` in a traceback (no `_evo_selfcheck`, no `problem_sizes`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import operators
from evo.surface.kernel_choice import BASELINE_SOURCE
from operators._paste import MARKER, pasted_source
from operators.add_rmsnorm.operator import SELFCHECK_FILE
from tests.golden.cases import Case
from tests.golden.goldens import TARGET, render

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture(scope="module")
def op():
    return operators.get("rmsnorm+residual")


def _namespace(op, p):
    space: dict = {}
    exec(op.selfcheck_source(p), space)  # noqa: S102 - the text evo writes into an export
    return space


def test_the_self_check_is_the_module_below_the_problem_s_constants(op):
    p = op.problem((5, 77), "fp16")
    text = op.selfcheck_source(p)
    head, pasted = text.split(MARKER, 1)
    assert MARKER + pasted == pasted_source(SELFCHECK_FILE)
    assert "SELFCHECK_SIZES = (5, 77)" in head and "SELFCHECK_DTYPE = torch.float16" in head
    space = _namespace(op, p)
    inputs = space["selfcheck_inputs"]("cpu")
    assert tuple(space["problem_sizes"](*inputs)) == p.sizes
    assert [t.dtype for t in inputs] == [t.dtype for t in op.make_inputs(p, 0, device="cpu")]
    assert all(bool(t.abs().sum() > 0) for t in inputs)


def test_reference_and_baseline_agree_with_the_operator_s(op):
    p = op.problem((6, 300), "fp32")
    space = _namespace(op, p)
    inputs = space["selfcheck_inputs"]("cpu")
    mine, theirs = space["selfcheck_reference"](*inputs), op.reference(*inputs)
    assert len(mine) == 2 and all(bool((a - b).abs().max() < 1e-6) for a, b in zip(mine, theirs, strict=True))
    base = space["selfcheck_baseline"](*inputs)
    eager = op.baselines()[0].make(p)(*inputs)
    assert all(bool((a - b).abs().max() < 1e-6) for a, b in zip(base, eager, strict=True))
    assert bool((base[0] - mine[0]).abs().max() < 1e-4) and not bool((base[0] - inputs[0]).abs().max() < 1e-2)


def test_an_exported_module_checks_both_outputs_as_a_script(op, tmp_path):
    p = op.problem((5, 77), "fp32")
    genome = op.family.seeds(p, TARGET)[0]
    path = tmp_path / "exported_add_rmsnorm.py"
    path.write_text(render(Case(op.name, p, genome, "plain", "seed", export=True)))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "PASS" in done.stdout


def test_the_baseline_fallback_fills_a_tuple_out(op):
    import torch

    p = op.problem((4, 64), "fp32")
    space = _namespace(op, p)
    module = type(sys)("elite")
    module.selfcheck_baseline = space["selfcheck_baseline"]
    namespace = {"_EVO_ENTRY": "add_rmsnorm"}
    exec(BASELINE_SOURCE, namespace)  # noqa: S102 - the dispatcher's text in a zoo module
    baseline = namespace["_evo_baseline"](module)
    x, residual, weight = space["selfcheck_inputs"]("cpu")
    want = space["selfcheck_baseline"](x, residual, weight)
    out = (torch.empty_like(x), torch.empty_like(x))
    got = baseline(x, residual, weight, out=out)
    assert got is out and torch.equal(out[0], want[0]) and torch.equal(out[1], want[1])
