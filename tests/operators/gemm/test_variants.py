"""GEMM with a fused epilogue (operators/gemm/variants.py): `operators.get` of its variant names, the operator's
facts (schema, shapes, inputs), rendered kernels against the reference in the Triton interpreter at ragged sizes
on every memory path, the launcher's refusals, what plain GEMM renderings no longer carry, and evo.api."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import operators
from evo.api import as_torch_op, load
from evo.evaluate.modules import load_source
from evo.problem import HOPPER, INTERPRETED_HOPPER, Problem
from evo.surface.export import HEADER_ONE
from operators.gemm.variants import GemmEpilogueOperator

# together these use every part: scale, bias, gelu, gelu_tanh, silu, relu, swiglu, residual
NAMES = ["gemm+bias+gelu", "gemm+gelu_tanh", "gemm+silu+residual", "gemm+scale+bias+relu+residual", "gemm+swiglu",
         "gemm+swiglu+residual"]
OPS = {name: operators.get(name) for name in NAMES}
RAGGED = (37, 50, 40)  # N in fp16 is not a 16-byte row: SwiGLU (no padded rows) runs pointer kernels only
RAGGED_K = (33, 96, 65)  # K unaligned: padded rows for host descriptors (not for SwiGLU)
ALIGNED = (33, 96, 72)  # 16-byte rows, ragged tiles: every memory path


def _tensors(inputs):
    return [x for x in inputs if isinstance(x, torch.Tensor)]


def _run(module, op, problem: Problem, seed: int = 0) -> float:
    """The module's matmul on seeded inputs into a NaN-poisoned `out`: ||C - ref|| / ||ref|| (inf on NaN)."""
    inputs = op.make_inputs(problem, seed, device="cpu")
    d = problem.dims
    out = torch.full((d["M"], d["N"]), float("nan"), dtype=inputs[0].dtype)
    assert module.matmul(*inputs, out=out) is out
    if torch.isnan(out).any():
        return float("inf")
    ref = op.reference(*inputs)
    return float((out.float() - ref).norm() / ref.norm())


# -- the operator ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, schema", [
    ("gemm+bias", "(Tensor a, Tensor b, Tensor bias) -> Tensor"),
    ("gemm+bias+gelu", "(Tensor a, Tensor b, Tensor bias) -> Tensor"),
    ("gemm+gelu_tanh", "(Tensor a, Tensor b) -> Tensor"),
    ("gemm+swiglu", "(Tensor a, Tensor b) -> Tensor"),
    ("gemm+silu+residual", "(Tensor a, Tensor b, Tensor residual) -> Tensor"),
    ("gemm+scale", "(Tensor a, Tensor b, float scale) -> Tensor"),
    ("gemm+scale+bias+relu+residual", "(Tensor a, Tensor b, Tensor bias, Tensor residual, float scale) -> Tensor"),
])
def test_get_names_the_variant_and_its_schema(name, schema):
    op = operators.get(name)
    assert isinstance(op, GemmEpilogueOperator) and op.name == name and op.epilogue.name == name[len("gemm+"):]
    assert op.torch_schema == schema
    assert op.family.b_tiles == (2 if "swiglu" in name else 1)
    assert op.family.reads_tile == ("residual" in name)
    assert bool(op.family.ws_refusal) == ("residual" in name or "scale" in name)


@pytest.mark.parametrize("name", NAMES + ["gemm+scale"])
def test_tensor_shapes_agree_with_make_inputs(name):
    op = operators.get(name)
    problem = op.problem((5, 6, 7), "fp16")
    inputs = op.make_inputs(problem, 1, device="cpu")
    tensors = _tensors(inputs)
    shapes = op.tensor_shapes(problem)
    assert [tuple(t.shape) for t in tensors] == shapes[:-1] and shapes[-1] == (5, 6)
    assert all(t.dtype == torch.float16 for t in tensors)
    assert tuple(op.empty_output(*inputs).shape) == (5, 6)
    if op.epilogue.swiglu:
        assert shapes[1] == (7, 12)  # B[K, 2N]: the gate's N columns, then the up projection's
    n_scalars = len(inputs) - len(tensors)
    assert n_scalars == (1 if op.epilogue.scale else 0)
    if op.epilogue.scale:
        assert isinstance(inputs[-1], float) and 0.25 <= inputs[-1] < 2
    meta = op.make_inputs(problem, 1, device="meta")
    assert [tuple(t.shape) for t in _tensors(meta)] == shapes[:-1]
    # seeded: the same seed gives the same inputs, another seed others
    again, other = op.make_inputs(problem, 1, device="cpu"), op.make_inputs(problem, 2, device="cpu")
    assert all(torch.equal(x, y) for x, y in zip(tensors, _tensors(again), strict=True))
    assert not torch.equal(tensors[0], _tensors(other)[0])


def test_swiglu_counts_both_projections():
    op, plain = operators.get("gemm+swiglu"), operators.get("gemm")
    problem, plain_problem = op.problem((64, 100, 32), "bf16"), plain.problem((64, 100, 32), "bf16")
    assert op.flops(problem) == 2 * plain.flops(plain_problem)
    assert op.bytes(problem) == plain.bytes(plain_problem) + 32 * 100 * 2
    biased = operators.get("gemm+bias+residual")
    assert biased.bytes(problem) == plain.bytes(plain_problem) + (100 + 64 * 100) * 2


@pytest.mark.parametrize("name, message", [
    ("softmax+bias", "operator 'softmax' takes no options after '\\+'"),
    ("gemm+gleu", "unknown epilogue part 'gleu'"),
    ("gemm+gelu+bias", "canonical order: bias\\+gelu"),
    ("gemm+bias+swiglu", "swiglu takes neither bias nor scale"),
    ("gemm+gelu+silu", "one activation at most"),
    ("gemn+bias", "unknown operator 'gemn'"),
])
def test_get_refuses_bad_names(name, message):
    with pytest.raises(ValueError, match=message):
        operators.get(name)


def test_the_operator_needs_an_epilogue():
    from operators.gemm.epilogue import Epilogue

    with pytest.raises(ValueError, match="needs an epilogue"):
        GemmEpilogueOperator(None, Epilogue())


# -- rendered kernels in the interpreter ----------------------------------------------------------------------
# (genes over family.base(), shape, gene values the repair must keep for the case to test what it names)
TARGETED = [
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16), RAGGED, dict(memory="pointer")),
    (dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, persistent=True, GROUP_M=4, raster="col"), RAGGED_K,
     dict(persistent=True, memory="pointer")),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor", persistent=True, epilogue_subtile=True),
     ALIGNED, dict(memory="host_descriptor", persistent=True, epilogue_subtile=True)),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, memory="descriptor", num_stages=2), ALIGNED, dict(memory="descriptor")),
    (dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, memory="host_descriptor"), ALIGNED, dict(memory="host_descriptor")),
]
TARGETED_ONE_TILE = [  # features a SwiGLU kernel refuses
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, split_k=3), RAGGED_K, dict(split_k=3)),
    (dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, persistent=True, stream_k=True), RAGGED,
     dict(persistent=True, stream_k=True)),
    (dict(BLOCK_M=16, BLOCK_N=96, BLOCK_K=32, memory="host_descriptor", persistent=True), ALIGNED,
     dict(BLOCK_N=96, memory="host_descriptor")),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor", pad_rows=True, epilogue_subtile=True),
     RAGGED_K, dict(pad_rows=True)),
]


def _cases():
    out = []
    for name in NAMES:
        swiglu = "swiglu" in name
        for i, (values, shape, keep) in enumerate(TARGETED + ([] if swiglu else TARGETED_ONE_TILE)):
            out.append(pytest.param(name, values, shape, keep, None, id=f"{name}-targeted{i}"))
        for seed in (0, 1):
            for shape in (RAGGED, ALIGNED if swiglu else RAGGED_K):
                size = "x".join(map(str, shape))
                out.append(pytest.param(name, None, shape, {}, seed, id=f"{name}-random{seed}-{size}"))
    return out


@pytest.mark.parametrize("name, values, shape, keep, seed", _cases())
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's sigmoid of large negatives
def test_rendered_kernel_matches_the_reference(name, values, shape, keep, seed):
    op = OPS[name]
    problem = op.problem(shape, "fp16")
    if seed is None:
        raw = op.family.make(op.family.base(**values))
        genome = op.family.repair(raw, problem, HOPPER, np.random.default_rng(0))
        assert {k: genome[k] for k in keep} == keep, f"repair dropped what the case tests: {genome}"
    else:
        # drawn for the interpreter's target: a Gluon kernel runs on GPUs only
        genome = op.family.random(np.random.default_rng(seed), problem, INTERPRETED_HOPPER)
    module = load_source(op.render(genome, problem, HOPPER))
    assert _run(module, op, problem) <= op.tolerance(problem), str(genome)


def test_the_comparison_catches_a_missing_epilogue_part():
    """The reference check is not blind to the epilogue: the kernel without its bias or its GELU fails it."""
    op = OPS["gemm+bias+gelu"]
    problem = op.problem(RAGGED, "fp16")
    source = op.render(op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)), problem, HOPPER)
    assert _run(load_source(source), op, problem) <= op.tolerance(problem)
    no_gelu = source.replace("x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))", "pass")
    no_bias = source.replace("x += tl.load(bias_ptr", "x -= tl.load(bias_ptr")
    for broken in (no_gelu, no_bias):
        assert broken != source
        assert _run(load_source(broken), op, problem) > 10 * op.tolerance(problem)


def test_swiglu_output_is_n_wide_and_the_out_argument_is_written():
    op = OPS["gemm+swiglu"]
    problem = op.problem(RAGGED, "fp16")
    module = load_source(op.render(op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16)), problem,
                                   HOPPER))
    a, b = op.make_inputs(problem, 4, device="cpu")
    c = module.matmul(a, b)
    assert tuple(c.shape) == (37, 50) and c.dtype == torch.float16
    out = torch.zeros(37, 50, dtype=torch.float16)
    assert module.matmul(a, b, out=out) is out and torch.equal(out, c)
    ref = op.reference(a, b)
    assert float((c.float() - ref).norm() / ref.norm()) <= op.tolerance(problem)
    # the gate and the up projection are not interchangeable: swapping B's halves changes the result
    swapped = torch.cat([b[:, 50:], b[:, :50]], dim=1).contiguous()
    assert float((module.matmul(a, swapped).float() - ref).norm() / ref.norm()) > 0.1


@pytest.fixture(scope="module")
def full_module():
    op = OPS["gemm+scale+bias+relu+residual"]
    problem = op.problem(RAGGED, "fp16")
    return load_source(op.render(op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)), problem, HOPPER))


def _full_inputs():
    op = OPS["gemm+scale+bias+relu+residual"]
    return op.make_inputs(op.problem(RAGGED, "fp16"), 0, device="cpu")


@pytest.mark.parametrize("change, message", [
    (lambda a, b, bias, res, s: (a, b, bias[:-1], res, s), "bias must be a contiguous vector of N=50"),
    (lambda a, b, bias, res, s: (a, b, torch.cat([bias, bias[:1]]), res, s), "bias must be"),
    (lambda a, b, bias, res, s: (a, b, bias.float(), res, s), "bias must be"),
    (lambda a, b, bias, res, s: (a, b, bias.repeat(2)[::2], res, s), "bias must be"),
    (lambda a, b, bias, res, s: (a, b, bias, res[:, :-1], s), "residual must be a contiguous 37x50"),
    (lambda a, b, bias, res, s: (a, b, bias, res[:-1], s), "residual must be"),
    (lambda a, b, bias, res, s: (a, b, bias, res.t().contiguous().t(), s), "residual must be"),
    (lambda a, b, bias, res, s: (a, b, bias, res, "2.0"), "scale must be a Python number, got str"),
    (lambda a, b, bias, res, s: (a, b, bias, res, True), "scale must be a Python number, got bool"),
    (lambda a, b, bias, res, s: (a, b, bias, res, torch.tensor(2.0)), "scale must be a Python number"),
])
def test_the_plan_refuses_bad_epilogue_operands(full_module, change, message):
    with pytest.raises(ValueError, match=message):
        full_module.matmul(*change(*_full_inputs()))


def test_the_plan_accepts_an_integer_scale(full_module):
    op = OPS["gemm+scale+bias+relu+residual"]
    a, b, bias, res, _ = _full_inputs()
    ref = op.reference(a, b, bias, res, 2)
    out = full_module.matmul(a, b, bias, res, 2)
    assert float((out.float() - ref).norm() / ref.norm()) <= op.tolerance(op.problem(RAGGED, "fp16"))


def test_a_swiglu_b_with_an_odd_number_of_columns_is_refused():
    op = OPS["gemm+swiglu"]
    problem = op.problem(RAGGED, "fp16")
    module = load_source(op.render(op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16)), problem,
                                   HOPPER))
    a = torch.randn(37, 40, dtype=torch.float16)
    with pytest.raises(ValueError, match="SwiGLU needs B\\[K, 2N\\].*B has 101 columns"):
        module.matmul(a, torch.randn(40, 101, dtype=torch.float16))
    # an out of the full width of B is refused: C has N = B's columns / 2
    with pytest.raises(ValueError, match="out must be a contiguous 37x50"):
        module.matmul(a, torch.randn(40, 100, dtype=torch.float16), out=torch.empty(37, 100, dtype=torch.float16))


def test_k_zero_is_refused_with_an_epilogue_and_zeros_without(full_module):
    _, _, bias, res, scale = _full_inputs()
    a, b = torch.empty(37, 0, dtype=torch.float16), torch.empty(0, 50, dtype=torch.float16)
    with pytest.raises(ValueError, match="K=0.*a fused epilogue needs K > 0"):
        full_module.matmul(a, b, bias, res, scale)
    plain = operators.get("gemm")
    problem = plain.problem(RAGGED, "fp16")
    module = load_source(plain.render(plain.family.make(plain.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)),
                                      problem, HOPPER))
    assert torch.equal(module.matmul(a, b), torch.zeros(37, 50, dtype=torch.float16))
    # an empty output needs no epilogue: M = 0 gives an empty result
    empty = full_module.matmul(torch.empty(0, 40, dtype=torch.float16), torch.randn(40, 50, dtype=torch.float16),
                               bias, torch.empty(0, 50, dtype=torch.float16), scale)
    assert tuple(empty.shape) == (0, 50)


@pytest.mark.parametrize("name", ["gemm+bias+gelu", "gemm+swiglu", "gemm+scale+bias+relu+residual"])
def test_the_rendered_module_names_its_epilogue(name):
    op = operators.get(name)
    problem = op.problem(ALIGNED, "fp16")
    genome = op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor"))
    source = op.render(genome, problem, HOPPER)
    module = load_source(source)
    assert f"fused epilogue: {op.epilogue.text}" in " ".join(module.__doc__.split())
    assert f"fused epilogue {op.epilogue.name}" in " ".join(module.matmul.__doc__.split())
    args = ", ".join(["a", "b", *op.epilogue.operands, "out=None"])
    assert f"matmul({args})" in module.__doc__
    ep = op.epilogue  # the kernel's epilogue switches (operators/gemm/kernel.py) are set from it
    assert {k: module.CONFIG[k] for k in ("SCALE", "BIAS", "ACTIVATION", "SWIGLU", "RESIDUAL")} == {
        "SCALE": ep.scale, "BIAS": ep.bias, "ACTIVATION": ep.activation or "", "SWIGLU": ep.swiglu,
        "RESIDUAL": ep.residual}
    if ep.swiglu:
        assert "silu(A @ B[:, :N]) * (A @ B[:, N:])" in module.__doc__


def test_plain_gemm_renderings_carry_no_epilogue():
    plain = operators.get("gemm")
    sources = []
    for shape in (RAGGED, ALIGNED):
        problem = plain.problem(shape, "fp16")
        for seed in range(6):
            genome = plain.family.random(np.random.default_rng(seed), problem, HOPPER)
            if genome["backend"] == "triton":  # (Gluon renderings: tests/operators/gemm/test_gluon_render.py)
                sources.append(plain.render(genome, problem, HOPPER))
    for values in (dict(memory="host_descriptor", persistent=True, epilogue_subtile=True), dict(memory="descriptor"),
                   dict(split_k=3), dict(persistent=True, stream_k=True), dict(BLOCK_N=96)):
        genome = plain.family.make(plain.family.base(**{"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, **values}))
        sources.append(plain.render(genome, problem, HOPPER))  # the ALIGNED problem
    for source in sources:
        module = load_source(source)
        assert not any(module.CONFIG[k] for k in ("SCALE", "BIAS", "ACTIVATION", "SWIGLU", "RESIDUAL"))
        assert "def matmul(a, b, out=None):" in source and "fused epilogue" not in module.__doc__
        assert "gemm_plan(a, b, None, None, None, out, CONFIG)" in source


# -- evo.api ----------------------------------------------------------------------------------------------
def test_load_and_as_torch_op_of_an_epilogue_module(tmp_path):
    op = OPS["gemm+scale+bias+relu+residual"]
    problem = op.problem(RAGGED, "fp32")
    source = op.render(op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)), problem, HOPPER)
    path = tmp_path / "kernel.py"
    # the first line `evo export` writes: load refuses a file without it before running any of it
    header = f"# {HEADER_ONE} {op.name} 37x50x40 fp32\n"
    path.write_text(header + source + f"\n_EVO_OPERATOR = {op.name!r}\n")
    fn = load(path)
    assert fn.operator == op.name and "+" not in fn.__name__
    assert fn.__name__.startswith("gemm_scale_bias_relu_residual_")
    inputs = op.make_inputs(problem, 5, device="cpu")
    ref = op.reference(*inputs)
    eager, dispatched = fn(*inputs), fn.op(*inputs)  # the launcher itself, and through the dispatcher
    for result in (eager, dispatched):
        assert tuple(result.shape) == (37, 50)
        assert float((result - ref).norm() / ref.norm()) <= op.tolerance(problem)
    assert load(path) is fn  # the same source is one op

    module = load_source(source)
    mm = as_torch_op(module.matmul, op, tag="epilogue_api")
    assert "+" not in mm.__name__ and torch.equal(mm(*inputs), module.matmul(*inputs))


def test_the_fake_implementation_of_swiglu_halves_b():
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = OPS["gemm+swiglu"]
    problem = op.problem(RAGGED, "fp32")
    module = load_source(op.render(op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16)), problem,
                                   HOPPER))
    mm = as_torch_op(module.matmul, op, tag="epilogue_fake")
    with FakeTensorMode():
        out = mm.op(torch.empty(7, 5), torch.empty(5, 6))
    assert tuple(out.shape) == (7, 3)
    a, b = op.make_inputs(problem, 6, device="cpu")
    compiled = torch.compile(lambda a, b: mm(a, b) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(a, b), 2 * module.matmul(a, b))
