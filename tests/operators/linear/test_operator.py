"""linear and its variants: rendered modules checked in the Triton interpreter (fp16, fp32) against the reference,
over seeds and seeded random genomes at M = 1, 3 and 16 with N and K that are not multiples of the blocks; the
rendered text is the kernel file pasted verbatim below a header; the split's workspace is left zeroed."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.evaluate.check import run_check
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from genomes.base import InvalidGenome
from operators._paste import MARKER, pasted_source
from operators.linear.operator import KERNEL_FILE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = INTERPRETED_HOPPER
VARIANTS = ["linear", "linear+residual", "linear+swiglu", "linear+rmsnorm", "linear+rmsnorm+swiglu", "linear+bias",
            "linear+rmsnorm+bias+residual", "linear+geglu", "linear+rmsnorm+geglu"]


def _genomes(op, p, seeds, randoms, seed):
    rng = np.random.default_rng(seed)
    pool = op.family.seeds(p, TARGET)
    picked = [pool[i] for i in rng.choice(len(pool), size=min(seeds, len(pool)), replace=False)]
    return picked + [op.family.random(rng, p, TARGET) for _ in range(randoms)]


def _check(op, p, genomes):
    for i, g in enumerate(genomes):
        module = load_source(op.render(g, p, TARGET))
        result = run_check(module.linear, op, p, seed=i, device="cpu")
        assert result.status == "ok", f"{p.key} {g}: {result.reason}"


@pytest.mark.parametrize("shape", [(1, 100, 300), (3, 72, 200), (16, 40, 130)])
@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_linear_seeds_and_random_genomes_match_reference(shape, dtype):
    op = operators.get("linear")
    p = op.problem(shape, dtype)
    _check(op, p, _genomes(op, p, seeds=8, randoms=6, seed=sum(shape)))


@pytest.mark.parametrize("name", VARIANTS[1:])
@pytest.mark.parametrize("shape,dtype", [((1, 100, 300), "fp32"), ((3, 72, 200), "fp16"), ((16, 40, 130), "fp16")])
def test_variants_match_reference(name, shape, dtype):
    op = operators.get(name)
    p = op.problem(shape, dtype)
    _check(op, p, _genomes(op, p, seeds=3, randoms=3, seed=len(name) + shape[0]))


@pytest.mark.parametrize("reduction", ["atomic", "ordered"])
@pytest.mark.parametrize("math", ["fma", "dot"])
def test_split_leaves_its_workspace_zeroed_and_ordered_is_deterministic(reduction, math):
    import torch

    if math == "dot" and reduction == "atomic":
        pytest.skip("a split tl.dot tile is reduced in ordered slots (the family's rule)")
    op = operators.get("linear+swiglu")
    p = op.problem((3, 50, 320), "fp32")
    g = op.family.make(op.family.base(math=math, BLOCK_N=16, BLOCK_K=32, SPLIT_K=8, reduction=reduction))
    assert op.family.violations(g, p, TARGET) == []
    module = load_source(op.render(g, p, TARGET))
    x, w = op.make_inputs(p, 0, device="cpu")
    first = module.linear(x, w)
    plan = next(iter(module._PLANS.values()))
    workspace, counters = plan.workspace
    assert not counters.any()  # the last program of each tile reset its counter
    assert reduction == "ordered" or not workspace.any()  # and the atomic slot (ordered slots are overwritten)
    second = module.linear(x, w)
    assert float((first - op.reference(x, w)).norm() / op.reference(x, w).norm()) < 1e-5
    assert torch.equal(first, second) or reduction == "atomic"


def test_rendered_module_is_the_kernel_file_below_a_header():
    op = operators.get("linear+rmsnorm+swiglu")
    p = op.problem((1, 4096, 4096), "bf16")
    g = op.family.seeds(p, TARGET)[0]
    src = op.render(g, p, TARGET)
    body = pasted_source(KERNEL_FILE)
    assert src.endswith(body) and src.count(MARKER) == 1
    header = src[: -len(body)]
    assert "def linear_kernel" not in header and "CONFIG = {" in header
    assert "def linear(x, weight, norm_weight, out=None, eps=1e-06):" in header
    assert "'SWIGLU': True" in header and "'NORM': True" in header and f"'BLOCK_N': {g['BLOCK_N']}," in header
    other = op.family.make(op.family.base(math="fma", BLOCK_K=128, SPLIT_K=4, reduction="ordered"))
    assert op.render(other, p, TARGET).endswith(body)  # another genome: other constants, the same kernel text


def test_leading_dims_out_and_bad_input():
    import torch

    op = operators.get("linear+residual")
    p = op.problem((6, 40, 64), "fp32")
    module = load_source(op.render(op.family.seeds(p, TARGET)[0], p, TARGET))
    x, w, r = op.make_inputs(p, 0, device="cpu")
    y = module.linear(x.reshape(2, 3, 64), w, r.reshape(2, 3, 40))
    assert y.shape == (2, 3, 40)
    assert float((y.reshape(6, 40) - op.reference(x, w, r)).norm()) < 1e-4
    out = torch.full((6, 40), float("nan"))
    assert module.linear(x, w, r, out=out) is out and bool(out.isfinite().all())
    assert module.linear(x[:0], w, r[:0]).shape == (0, 40)
    with pytest.raises(ValueError, match=r"weight must be \[N, K\] .* with K=64"):
        module.linear(x, w[:, :32], r)
    with pytest.raises(ValueError, match="residual must have shape"):
        module.linear(x, w, r[:, :8])
    with pytest.raises(ValueError, match="out must be a contiguous tensor of shape"):
        module.linear(x, w, r, out=out.t())
    wt = torch.randn(64, 40).t()  # not contiguous: copied each call, never misread
    assert float((module.linear(x, wt, r) - (x @ wt.t() + r)).norm()) < 1e-4


@pytest.mark.parametrize("split", [1, 4])
def test_residual_updated_in_place(split):
    """out may be the residual itself: each element is read by the program that writes it, before it writes it."""
    op = operators.get("linear+rmsnorm+bias+residual")
    p = op.problem((3, 40, 96), "fp32")
    g = op.family.make(op.family.base(math="fma", BLOCK_N=16, BLOCK_K=32, SPLIT_K=split))
    module = load_source(op.render(g, p, TARGET))
    x, w, nw, b, r = op.make_inputs(p, 0, device="cpu")
    want = op.reference(x, w, nw, b, r)
    got = module.linear(x, w, nw, b, r, out=r)
    assert got is r and float((r - want).norm() / want.norm()) < 1e-5
    with pytest.raises(ValueError, match=r"bias must have shape \(40,\)"):
        module.linear(x, w, nw, b[:3], r)


def test_names_schema_selfcheck_and_baselines():
    import torch

    op = operators.get("linear+rmsnorm+swiglu")
    assert op.torch_schema == "(Tensor x, Tensor weight, Tensor norm_weight, float eps=1e-06) -> Tensor"
    with pytest.raises(ValueError, match="spell the variant 'linear\\+rmsnorm\\+swiglu'"):
        operators.get("linear+swiglu+rmsnorm")
    with pytest.raises(ValueError, match="linear\\+swiglu takes neither a residual"):
        operators.get("linear+swiglu+residual")
    for name in VARIANTS:
        op = operators.get(name)
        p = op.problem((3, 24, 40), "fp32")
        namespace: dict = {}
        exec(compile(op.selfcheck_source(p), name, "exec"), namespace)
        inputs = namespace["selfcheck_inputs"]("cpu")
        assert tuple(namespace["problem_sizes"](*inputs)) == p.sizes
        ref, base = namespace["selfcheck_reference"](*inputs), namespace["selfcheck_baseline"](*inputs)
        assert torch.allclose(ref, op.reference(*inputs), atol=1e-5)
        assert torch.allclose(base, op.baselines()[0].make(p)(*inputs), atol=1e-5)
        assert float((base - ref).norm() / ref.norm()) < op.tolerance(p)
    plain = operators.get("linear")
    assert plain.baselines()[0].name == "cublas" and [b.name for b in plain.bench_baselines()] == ["cublas",
                                                                                                  "torch_compile"]


def test_invalid_genome_is_refused():
    op = operators.get("linear")
    p = op.problem((1, 64, 64), "fp16")
    with pytest.raises(InvalidGenome, match="registers per thread"):
        op.render(op.family.make(op.family.base(BLOCK_N=256, BLOCK_K=1024, reduce_k="end")), p, TARGET)


@pytest.mark.parametrize("name", ["linear", "linear+rmsnorm+swiglu"])
def test_wasteful_genome_on_a_small_problem_is_right(name):
    """Blocks wider than N and K and more splits than K has steps (soft rules) still compute the right result."""
    op = operators.get(name)
    p = op.problem((2, 20, 48), "fp32")
    g = op.family.make(op.family.base(math="dot", BLOCK_N=64, BLOCK_K=128, SPLIT_K=4, num_stages=2,
                                      reduction="ordered"))
    assert op.family.violations(g, p, TARGET) == []
    _check(op, p, [g])


def test_as_torch_op_with_its_fake():
    """The entry as a torch custom op (evo.api): the op computes the reference, its fake gives the output's shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from evo.api import as_torch_op

    op = operators.get("linear+rmsnorm+bias")
    p = op.problem((2, 40, 64), "fp32")
    entry = load_source(op.render(op.family.seeds(p, TARGET)[0], p, TARGET)).linear
    fn = as_torch_op(entry, op, tag="test_linear_op")
    inputs = op.make_inputs(p, 0, device="cpu")
    ref = op.reference(*inputs)
    assert float((fn.op(*inputs) - ref).norm() / ref.norm()) < 1e-5
    with FakeTensorMode() as mode:
        assert tuple(fn.op(*(mode.from_tensor(t) for t in inputs)).shape) == (2, 40)
