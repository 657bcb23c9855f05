"""The self-check code of GEMMs with a fused epilogue (operators/gemm/selfcheck.py, pasted): the five names
exist, the inputs have `make_inputs`' shapes and dtypes, the reference and baseline ARE `Epilogue.reference` and
`Epilogue.eager` for every part (so they cannot drift), the code imports torch only, a rendered kernel passes
it in the Triton interpreter, and `evo export` of an epilogue run ends with it (tests/fixtures/run_fixture.py)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import DTYPES, HOPPER
from evo.store.sqlite import Store
from evo.surface.export import export_one
from operators.gemm.epilogue import ACTIVATIONS, PARTS, Epilogue
from operators.gemm.operator import SELFCHECK_FILE
from operators.gemm.variants import TOLERANCE
from tests.fixtures.run_fixture import make_run

NAMES = ["gemm+bias+gelu", "gemm+gelu_tanh", "gemm+swiglu", "gemm+scale+bias+relu+residual", "gemm+silu+residual"]
NAMES_ALL = NAMES + ["gemm+swiglu+residual", "gemm+scale", "gemm+bias", "gemm+residual", "gemm+scale+silu"]


def _pairs() -> list[tuple[str, ...]]:
    """Every pair of parts the parser accepts, in canonical order."""
    pairs = []
    for i, first in enumerate(PARTS):
        for second in PARTS[i + 1:]:
            try:
                pairs.append(Epilogue.parse((first, second)).parts)
            except ValueError:
                pass  # two activations, or swiglu with a bias or scale
    return pairs


# every part alone and every accepted pair: each step of reference and eager, and their order
PARTS_CASES = [(p,) for p in PARTS] + _pairs()
SHAPE = (37, 50, 40)  # M, N, K: ragged, N not a multiple of anything


def _selfcheck(op, problem) -> dict:
    namespace: dict = {}
    exec(compile(op.selfcheck_source(problem), f"<{op.name} selfcheck>", "exec"), namespace)
    return namespace


def _rel(x, ref) -> float:
    return float((x.float() - ref.float()).norm() / ref.float().norm())


# -- the generated code ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES_ALL)
def test_the_code_defines_the_five_names_and_imports_torch_only(name):
    op = operators.get(name)
    problem = op.problem(SHAPE, "fp16")
    code = op.selfcheck_source(problem)
    imports = {a.name for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import) for a in node.names}
    assert imports == {"torch"} and not any(isinstance(n, ast.ImportFrom) for n in ast.walk(ast.parse(code)))
    ns = _selfcheck(op, problem)
    for fn in ("selfcheck_inputs", "selfcheck_reference", "selfcheck_baseline", "problem_sizes"):
        assert callable(ns[fn]), fn
    assert ns["SELFCHECK_TOLERANCE"] == op.tolerance(problem) == TOLERANCE["fp16"]


@pytest.mark.parametrize("name", NAMES_ALL)
def test_inputs_are_make_inputs_shapes_and_the_problem_sizes(name):
    op = operators.get(name)
    problem = op.problem(SHAPE, "fp16")
    ns = _selfcheck(op, problem)
    inputs = ns["selfcheck_inputs"]("cpu")
    expected = op.make_inputs(problem, 0, device="cpu")
    assert len(inputs) == len(expected)
    for got, want in zip(inputs, expected, strict=True):
        if isinstance(want, torch.Tensor):
            assert isinstance(got, torch.Tensor) and got.shape == want.shape and got.dtype == torch.float16
            assert got.count_nonzero() > 0.9 * got.numel()  # standard normal: never zeros
        else:  # the scale: a Python float, drawn as make_inputs draws it
            assert type(got) is float and 0.25 <= got < 2
    assert tuple(ns["problem_sizes"](*inputs)) == problem.sizes == SHAPE  # N: the output's width
    if op.epilogue.swiglu:
        assert inputs[1].shape == (40, 100)  # B[K, 2N]
    # seeded: the same inputs every call
    again = ns["selfcheck_inputs"]("cpu")
    assert all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(inputs, again, strict=True))


@pytest.mark.parametrize("name", NAMES_ALL)
@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_reference_is_the_epilogue_reference_and_baseline_its_eager(name, dtype):
    op = operators.get(name)
    problem = op.problem(SHAPE, dtype)
    ns = _selfcheck(op, problem)
    inputs = ns["selfcheck_inputs"]("cpu")
    assert all(x.dtype == getattr(torch, DTYPES[dtype]) for x in inputs if isinstance(x, torch.Tensor))
    ref = ns["selfcheck_reference"](*inputs)
    assert ref.dtype == torch.float32 and ref.shape == (SHAPE[0], SHAPE[1])
    assert torch.equal(ref, op.epilogue.reference(*inputs)) and torch.equal(ref, op.reference(*inputs))
    base = ns["selfcheck_baseline"](*inputs)
    assert base.dtype == inputs[0].dtype and torch.equal(base, op.epilogue.eager(*inputs))
    assert _rel(base, ref) <= ns["SELFCHECK_TOLERANCE"]


@pytest.mark.parametrize("parts", PARTS_CASES, ids=lambda p: "+".join(p))
def test_every_part_and_pair_agrees_with_the_epilogue(parts):
    """The drift guard: each part's generated step computes what Epilogue.reference / Epilogue.eager compute."""
    ep = Epilogue.parse(parts)
    op = operators.get("gemm+" + ep.name)
    ns = _selfcheck(op, op.problem((9, 12, 16), "fp16"))
    inputs = ns["selfcheck_inputs"]("cpu")
    assert torch.equal(ns["selfcheck_reference"](*inputs), ep.reference(*inputs))
    assert torch.equal(ns["selfcheck_baseline"](*inputs), ep.eager(*inputs))
    assert ns["SELFCHECK_PARTS"] == ep.parts


def test_the_module_names_every_activation():
    text = SELFCHECK_FILE.read_text()
    assert all(f'"{name}" in SELFCHECK_PARTS' in text for name in ACTIVATIONS)


def test_the_plain_gemm_checks_itself_with_no_parts():
    op = operators.get("gemm")
    ns = _selfcheck(op, op.problem((9, 12, 16), "fp16"))
    a, b = ns["selfcheck_inputs"]("cpu")
    assert ns["SELFCHECK_PARTS"] == () and torch.equal(ns["selfcheck_reference"](a, b), op.reference(a, b))
    assert torch.equal(ns["selfcheck_baseline"](a, b), torch.matmul(a, b)) and ns["problem_sizes"](a, b) == (9, 12, 16)


# -- a rendered kernel against its self-check, in the interpreter ---------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_a_rendered_kernel_passes_its_self_check(name):
    """A pointer kernel rendered for a small ragged problem, with the self-check appended as `evo export` does,
    agrees with selfcheck_reference within SELFCHECK_TOLERANCE under TRITON_INTERPRET=1 (tests/conftest.py)."""
    if torch.cuda.is_available():
        pytest.skip("checks the interpreter on CPU tensors; tests/gpu covers the kernels on a GPU")
    assert os.environ.get("TRITON_INTERPRET") == "1"
    op = operators.get(name)
    problem = op.problem((33, 48, 40), "fp16")
    genome = op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16))
    module = load_source(op.render(genome, problem, HOPPER) + "\n\n" + op.selfcheck_source(problem))
    inputs = module.selfcheck_inputs("cpu")
    assert tuple(module.problem_sizes(*inputs)) == problem.sizes
    out = module.matmul(*inputs)
    ref = module.selfcheck_reference(*inputs)
    assert out.shape == ref.shape and bool(torch.isfinite(out).all())
    assert _rel(out, ref) <= module.SELFCHECK_TOLERANCE
    # and it would catch a kernel that skipped the epilogue (the plain product)
    assert _rel(torch.matmul(inputs[0].float(), inputs[1].float())[:, :48], ref) > module.SELFCHECK_TOLERANCE


# -- evo export of an epilogue run ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def epilogue_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs"), name="ep", operator="gemm+scale+bias+relu+residual",
                    shapes=("48x64x32",), n_random=3, fast_elite={"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32})


def test_export_of_an_epilogue_run_ends_with_its_self_check(epilogue_run):
    text, elite = export_one(Store(epilogue_run / "store.sqlite"), (48, 64, 32), "fp16")
    assert elite.problem.operator == "gemm+scale+bias+relu+residual"
    assert "offers no self-check" not in text
    for words in ("def selfcheck_inputs(device):", "def selfcheck_reference(a, b, *operands):",
                  "SELFCHECK_PARTS = ('scale', 'bias', 'relu', 'residual')",
                  'torch.addmm(args["bias"], a, b, alpha=alpha)', "_EVO_SIZES = (48, 64, 32)", "def _evo_selfcheck()"):
        assert words in text, words


@pytest.mark.slow
def test_exported_epilogue_module_passes_in_the_interpreter(epilogue_run, tmp_path):
    text, _ = export_one(Store(epilogue_run / "store.sqlite"), (48, 64, 32), "fp16")
    path = tmp_path / "kernel.py"
    path.write_text(text)
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("PYTHONPATH", None)
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout and "gemm+scale+bias+relu+residual" in result.stdout
