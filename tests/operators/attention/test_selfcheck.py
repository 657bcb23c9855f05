"""The self-check of exported attention kernels (operators/attention/selfcheck.py, pasted below the problem's
constants): one real module for every variant. The constants the operator writes are the module's own, the code
imports torch and math only, the inputs are `make_inputs`' for the problem, the reference agrees with the operator's
and the baseline IS the operator's primary baseline (SDPA, the window's SDPA, or Gemma 2's eager path), bit for
bit, so they cannot drift; a rendered kernel passes it in the Triton interpreter (fp16) and a wrong mask fails it."""

from __future__ import annotations

import ast
import os

import pytest
import torch

import operators
import operators.attention.selfcheck as selfcheck_module
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from operators._paste import MARKER
from operators.attention.operator import SELFCHECK_FILE, TOLERANCE

VARIANTS = [  # (operator, sizes): every mask, with and without shared KV heads
    ("attention", (1, 4, 2, 3, 9, 16)),
    ("attention", (2, 2, 2, 5, 5, 8)),
    ("attention+causal", (1, 4, 2, 3, 9, 16)),  # fewer queries than keys: bottom-right, SDPA's causal_lower_right
    ("attention+causal", (1, 2, 2, 9, 9, 16)),  # equal lengths: SDPA's is_causal
    ("attention+softcap3", (1, 4, 2, 6, 11, 16)),
    ("attention+causal+window5", (1, 4, 1, 12, 20, 8)),  # a window alone: SDPA with a boolean mask
    ("attention+causal+softcap50+window7", (1, 4, 2, 10, 24, 16)),  # Gemma 2's local layers
]
IDS = [f"{name}-{'x'.join(map(str, sizes))}" for name, sizes in VARIANTS]


def _check(name: str, sizes: tuple[int, ...], dtype: str = "fp16"):
    op = operators.get(name)
    problem = op.problem(sizes, dtype)
    source = op.selfcheck_source(problem)
    return op, problem, source, load_source(source)


def _rel(x, ref) -> float:
    return float((x.float() - ref.float()).norm() / ref.float().norm())


def _constants(text: str) -> dict[str, object]:
    """The SELFCHECK_ names a text assigns at its top level, with their source."""
    return {t.id: ast.unparse(node.value) for node in ast.parse(text).body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name) and t.id.startswith("SELFCHECK_")}


# -- the code an export carries ------------------------------------------------------------------------------
@pytest.mark.parametrize("name, sizes", VARIANTS, ids=IDS)
def test_the_header_writes_the_module_s_constants_and_imports_torch_and_math_only(name, sizes):
    op, problem, source, check = _check(name, sizes)
    file_text = SELFCHECK_FILE.read_text()
    above, _ = file_text.split(MARKER)
    head, pasted = source.split(MARKER)
    assert _constants(head).keys() == _constants(above).keys()  # the operator writes every constant, and only them
    assert pasted == file_text.split(MARKER)[1]  # the rest verbatim
    tree = ast.parse(source)
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    froms = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imports == {"math", "torch"} and froms <= {"torch.nn.attention.bias"}
    for fn in ("selfcheck_inputs", "selfcheck_reference", "selfcheck_baseline", "problem_sizes"):
        assert callable(getattr(check, fn)), fn
    assert (check.SELFCHECK_CAUSAL, check.SELFCHECK_SOFTCAP, check.SELFCHECK_WINDOW) == (op.causal, op.softcap,
                                                                                          op.window)
    assert check.SELFCHECK_TOLERANCE == op.tolerance(problem) == TOLERANCE["fp16"]


@pytest.mark.parametrize("name, sizes", VARIANTS, ids=IDS)
def test_inputs_are_make_inputs_and_form_the_problem(name, sizes):
    op, problem, _, check = _check(name, sizes)
    inputs = check.selfcheck_inputs("cpu")
    expected = op.make_inputs(problem, 20240611, device="cpu")
    assert all(torch.equal(a, b) and a.dtype == torch.float16 for a, b in zip(inputs, expected, strict=True))
    assert all(t.count_nonzero() > 0.9 * t.numel() for t in inputs)  # standard normal: never zeros
    assert tuple(check.problem_sizes(*inputs)) == problem.sizes == sizes


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
@pytest.mark.parametrize("name, sizes", VARIANTS, ids=IDS)
def test_reference_is_the_operator_s_and_baseline_is_its_primary_baseline(name, sizes, dtype):
    """The drift guard: the pasted steps compute what the operator's reference and primary baseline compute."""
    op, problem, _, check = _check(name, sizes)
    q, k, v = (t.to(torch.float32 if dtype == "fp32" else torch.float16) for t in check.selfcheck_inputs("cpu"))
    ref = check.selfcheck_reference(q, k, v)
    assert ref.dtype == torch.float32 and ref.shape == q.shape
    assert torch.allclose(ref, op.reference(q, k, v), atol=1e-5, rtol=1e-5)
    primary = op.baselines()[0].make(problem)
    assert torch.equal(check.selfcheck_baseline(q, k, v), primary(q, k, v))
    assert check.selfcheck_baseline(q, k, v).dtype == q.dtype
    if op.softcap or op.window:  # model_baselines' primaries take the entry's scale
        assert torch.equal(check.selfcheck_baseline(q, k, v, scale=0.37), primary(q, k, v, scale=0.37))
    assert _rel(check.selfcheck_baseline(q, k, v), ref) < op.tolerance(problem)
    assert _rel(check.selfcheck_baseline(q, k, v, scale=0.37), ref) > op.tolerance(problem)  # the scale is taken


def test_each_mask_and_the_cap_change_the_result():
    """The switches are read: the same inputs under another mask or no cap are far outside the tolerance."""
    sizes = (1, 4, 2, 10, 24, 16)
    names = ["attention", "attention+causal", "attention+causal+window7", "attention+softcap3"]
    _, _, _, first = _check(names[0], sizes)
    inputs = first.selfcheck_inputs("cpu")
    refs = [_check(n, sizes)[3].selfcheck_reference(*inputs) for n in names]
    for i in range(len(refs)):
        for j in range(i + 1, len(refs)):
            assert _rel(refs[i], refs[j]) > 10 * TOLERANCE["fp16"], (names[i], names[j])


def test_the_module_runs_on_its_own():
    """Imported as it stands (its constants a small GQA problem without a mask), the module checks SDPA."""
    inputs = selfcheck_module.selfcheck_inputs("cpu")
    assert tuple(selfcheck_module.problem_sizes(*inputs)) == selfcheck_module.SELFCHECK_SIZES
    ref = selfcheck_module.selfcheck_reference(*inputs)
    assert torch.allclose(ref, operators.get("attention").reference(*inputs), atol=1e-5)
    assert _rel(selfcheck_module.selfcheck_baseline(*inputs), ref) < selfcheck_module.SELFCHECK_TOLERANCE


# -- a rendered kernel against its self-check, in the interpreter ---------------------------------------------
@pytest.mark.parametrize("name", ["attention+causal", "attention+causal+softcap50+window7"])
def test_a_rendered_kernel_passes_its_self_check(name):
    """A Triton kernel rendered for a small ragged GQA problem, with the self-check appended as `evo export` does,
    agrees with selfcheck_reference within SELFCHECK_TOLERANCE under TRITON_INTERPRET=1 (tests/conftest.py), and the
    check would catch a kernel that ignored the mask."""
    if torch.cuda.is_available():
        pytest.skip("checks the interpreter on CPU tensors; tests/gpu covers the kernels on a GPU")
    assert os.environ.get("TRITON_INTERPRET") == "1"
    op = operators.get(name)
    problem = op.problem((1, 4, 2, 13, 29, 16), "fp16")
    genome = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=16, num_warps=2, num_stages=2))
    module = load_source(op.render(genome, problem, HOPPER) + "\n\n" + op.selfcheck_source(problem))
    inputs = module.selfcheck_inputs("cpu")
    assert tuple(module.problem_sizes(*inputs)) == problem.sizes
    out = module.attention(*inputs)
    ref = module.selfcheck_reference(*inputs)
    assert out.shape == ref.shape and out.dtype == torch.float16 and bool(torch.isfinite(out).all())
    assert _rel(out, ref) <= module.SELFCHECK_TOLERANCE
    unmasked = load_source(operators.get("attention").selfcheck_source(operators.get("attention").problem(
        problem.sizes, "fp16")))
    assert _rel(unmasked.selfcheck_reference(*inputs), ref) > module.SELFCHECK_TOLERANCE
