"""rmsnorm+residual: rendered modules checked in the Triton interpreter (fp16, fp32) against the reference, over
seeds and seeded random genomes, decode and odd shapes; the rendered text is the kernel file pasted verbatim."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.evaluate.check import run_check
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from genomes.base import InvalidGenome
from operators._paste import MARKER, pasted_source
from operators.add_rmsnorm.operator import KERNEL_FILE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = INTERPRETED_HOPPER


@pytest.fixture(scope="module")
def op():
    return operators.get("rmsnorm+residual")


def _genomes(op, p, randoms, seed):
    rng = np.random.default_rng(seed)
    return op.family.seeds(p, TARGET) + [op.family.random(rng, p, TARGET) for _ in range(randoms)]


@pytest.mark.parametrize("shape", [(1, 4096), (3, 300), (16, 1000), (5, 77)])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_seeds_and_random_genomes_match_reference(op, shape, dtype):
    p = op.problem(shape, dtype)
    for i, g in enumerate(_genomes(op, p, randoms=3, seed=sum(shape))):
        module = load_source(op.render(g, p, TARGET))
        result = run_check(module.add_rmsnorm, op, p, seed=i, device="cpu")
        assert result.status == "ok", f"{p.key} {g}: {result.reason}"


def test_rendered_module_is_the_kernel_file_below_a_header(op):
    p = op.problem((1, 4096), "bf16")
    g = op.family.seeds(p, TARGET)[0]
    src = op.render(g, p, TARGET)
    body = pasted_source(KERNEL_FILE)
    assert src.endswith(body) and src.count(MARKER) == 1
    header = src[: -len(body)]
    assert "def add_rmsnorm_kernel" not in header and "CONFIG = {" in header and "def add_rmsnorm(" in header
    assert f"'BLOCK': {g['BLOCK']}" in header and "'SINGLE': True" in header
    # genomes that differ render different constants, never a different kernel text
    other = op.family.make(op.family.base(BLOCK=1024, mode="looped", num_stages=2))
    assert op.render(other, p, TARGET).endswith(body)


def test_outputs_eps_and_bad_input(op):
    import torch

    p = op.problem((4, 40), "fp32")
    module = load_source(op.render(op.family.seeds(p, TARGET)[0], p, TARGET))
    x, r, w = op.make_inputs(p, 0, device="cpu")
    x = x * 1e-3
    h = x + r * 1e-3
    y, h_out = module.add_rmsnorm(x, r * 1e-3, w, eps=1e-2)
    assert torch.equal(h_out, h)
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-2) * w
    assert float((y - ref).norm() / ref.norm()) < 1e-5
    out = (torch.full_like(x, float("nan")), torch.full_like(x, float("nan")))
    got = module.add_rmsnorm(x, r, w, out=out)
    assert got[0] is out[0] and got[1] is out[1] and bool(out[0].isfinite().all())
    with pytest.raises(ValueError, match="residual must have x's shape"):
        module.add_rmsnorm(x, r[:2], w)
    with pytest.raises(ValueError, match="weight must have shape"):
        module.add_rmsnorm(x, r, w[:-1])
    with pytest.raises(ValueError, match="out must be a pair"):
        module.add_rmsnorm(x, r, w, out=out[0])
    # a transposed (non-contiguous) input is copied, not misread
    xt = torch.randn(40, 4).t()
    y2, h2 = module.add_rmsnorm(xt, r, w)
    assert torch.allclose(h2, xt + r)


@pytest.mark.parametrize("mode", ["single", "looped"])
def test_residual_updated_in_place(op, mode):
    """out=(y, residual) updates the residual stream in place, as serving code does (each element is read before the
    program that reads it writes it)."""
    import torch

    p = op.problem((3, 300), "fp32")
    g = op.family.make(op.family.base(BLOCK=512 if mode == "single" else 128, mode=mode, num_warps=2))
    module = load_source(op.render(g, p, TARGET))
    x, r, w = op.make_inputs(p, 0, device="cpu")
    y_want, h_want = op.reference(x, r, w)
    y, h = module.add_rmsnorm(x, r, w, out=(torch.empty_like(x), r))
    assert h is r and float((r - h_want).norm() / h_want.norm()) < 1e-6
    assert float((y - y_want).norm() / y_want.norm()) < 1e-5


def test_eager_baseline_and_reference_agree(op):
    p = op.problem((3, 64), "fp32")
    inputs = op.make_inputs(p, 3, device="cpu")
    base = op.baselines()[0].make(p)(*inputs)
    ref = op.reference(*inputs)
    for b, r in zip(base, ref, strict=True):
        assert float((b - r).norm() / r.norm()) < 1e-5
    assert [b.name for b in op.bench_baselines()] == ["torch_eager", "torch_compile", "torch_formula"]
    formula = op.bench_baselines()[2].make(p)(*inputs)
    for b, r in zip(formula, ref, strict=True):
        assert float((b - r).norm() / r.norm()) < 1e-5


def test_variant_names_and_invalid_genome(op):
    assert op.name == "rmsnorm+residual" and op.entry == "add_rmsnorm"
    with pytest.raises(ValueError, match="rmsnorm takes one option, 'residual'"):
        operators.get("rmsnorm+gelu")
    p = op.problem((1, 4096), "fp16")
    with pytest.raises(InvalidGenome, match="single pass needs BLOCK >= N=4096"):
        op.render(op.family.make(op.family.base(BLOCK=1024)), p, TARGET)
    assert op.bytes(p) == (4 * 4096 + 4096) * 2 and op.tensor_shapes(p)[2] == (4096,)


def test_as_torch_op_with_its_fake(op):
    """The entry as a torch custom op (evo.api) returning (y, h); its fake gives both shapes."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from evo.api import as_torch_op

    p = op.problem((3, 64), "fp32")
    fn = as_torch_op(load_source(op.render(op.family.seeds(p, TARGET)[0], p, TARGET)).add_rmsnorm, op,
                     tag="test_add_rmsnorm_op")
    inputs = op.make_inputs(p, 0, device="cpu")
    for got, want in zip(fn.op(*inputs), op.reference(*inputs), strict=True):
        assert float((got - want).norm() / want.norm()) < 1e-5
    with FakeTensorMode() as mode:
        assert [tuple(t.shape) for t in fn.op(*(mode.from_tensor(t) for t in inputs))] == [(3, 64), (3, 64)]
