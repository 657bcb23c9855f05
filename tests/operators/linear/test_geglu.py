"""GeGLU beside SwiGLU in the decode GEMM (`linear+geglu`, `linear+rmsnorm+geglu`: Gemma's gate_up with
gelu_pytorch_tanh): the names, the kernel's GEGLU switch against GELU's tanh approximation (not SiLU, not exact GELU)
with the key split, the eager baseline and the export's self-check computing the same."""

from __future__ import annotations

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_names_and_refusals():
    assert operators.get("linear+rmsnorm+geglu").math.gated
    for name, words in (("linear+swiglu+geglu", "one gate"), ("linear+geglu+residual", "linear\\+geglu takes neither"),
                        ("linear+geglu+rmsnorm", "spell the variant 'linear\\+rmsnorm\\+geglu'")):
        with pytest.raises(ValueError, match=words):
            operators.get(name)


@pytest.mark.parametrize("split, reduction", [(1, "atomic"), (4, "ordered"), (8, "atomic")])
@pytest.mark.parametrize("name", ["linear+geglu", "linear+rmsnorm+geglu"])
def test_the_kernel_gates_with_gelu_tanh(name, split, reduction):
    op = operators.get(name)
    p = op.problem((3, 50, 320), "fp32")
    g = op.family.make(op.family.base(math="fma", BLOCK_N=16, BLOCK_K=32, SPLIT_K=split, reduction=reduction))
    assert op.family.violations(g, p, INTERPRETED_HOPPER) == []
    text = op.render(g, p, INTERPRETED_HOPPER)
    assert "'GEGLU': True" in text and "'SWIGLU': False" in text
    module = load_source(text)
    inputs = op.make_inputs(p, 0, device="cpu")
    out = module.linear(*inputs)
    ref = op.reference(*inputs)
    assert _rel(out, ref) < 1e-5
    x, w = inputs[0].float(), inputs[1].float()
    if op.math.norm:
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * inputs[2].float()
    gate, up = (x @ w.t()).chunk(2, dim=-1)
    assert _rel(ref, torch.nn.functional.gelu(gate, approximate="tanh") * up) < 1e-6
    assert _rel(ref, torch.nn.functional.silu(gate) * up) > 1e-2  # another gate would fail
    assert _rel(ref, torch.nn.functional.gelu(gate) * up) > 1e-4  # GELU exact differs from its tanh form


@pytest.mark.parametrize("name", ["linear+geglu", "linear+rmsnorm+geglu"])
def test_eager_baseline_and_self_check_compute_geglu(name):
    op = operators.get(name)
    p = op.problem((2, 64, 128), "fp32")
    inputs = op.make_inputs(p, 1, device="cpu")
    ref = op.reference(*inputs)
    (eager,) = op.baselines()
    assert eager.name == "eager" and "gelu_tanh" in eager.doc
    assert _rel(eager.make(p)(*inputs), ref) < 1e-5
    space: dict = {}
    exec(op.selfcheck_source(p), space)  # noqa: S102 - the text evo writes into an export
    assert _rel(space["selfcheck_reference"](*inputs), ref) < 1e-6
    assert _rel(space["selfcheck_baseline"](*inputs), ref) < 1e-5
    assert space["problem_sizes"](*inputs) == (2, 64, 128)
