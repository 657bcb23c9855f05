"""`gemm+geglu` (issue 45, item 2): the GEMM with GeGLU fused, gelu_tanh(A @ Bg) * (A @ Bu) over B = [gate | up]
[K, 2N], Gemma 2's gate_up at prefill sizes; the sibling of `gemm+swiglu` (tests/operators/gemm/test_variants.py).
The name and its refusals, the reference against hand-written torch (GELU's tanh form, not SiLU, not exact GELU),
rendered kernels against the reference in the Triton interpreter (fp16) on every memory path the family offers a
gate, the launcher's refusal of an odd B, the rendered module's switches, the baselines and the export's self-check;
the Gluon rendering is refused (one accumulator per tile)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER, INTERPRETED_HOPPER, Problem
from operators.gemm.epilogue import Epilogue
from operators.gemm.variants import GemmEpilogueOperator

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's sigmoid

NAMES = ["gemm+geglu", "gemm+geglu+residual"]
OPS = {name: operators.get(name) for name in NAMES}
RAGGED = (37, 50, 40)  # N in fp16 is not a 16-byte row: a gate (no padded rows) runs pointer kernels only
ALIGNED = (33, 96, 72)  # 16-byte rows, ragged tiles: every memory path


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.float() - ref.float()).norm() / ref.float().norm())


def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _run(module, op, problem: Problem, seed: int = 0) -> float:
    """The module's matmul on seeded inputs into a NaN-poisoned `out`: ||C - ref|| / ||ref|| (inf on NaN)."""
    inputs = op.make_inputs(problem, seed, device="cpu")
    d = problem.dims
    out = torch.full((d["M"], d["N"]), float("nan"), dtype=inputs[0].dtype)
    assert module.matmul(*inputs, out=out) is out
    if torch.isnan(out).any():
        return float("inf")
    return _rel(out, op.reference(*inputs))


# -- the operator -----------------------------------------------------------------------------------------------
def test_the_name_gives_the_gated_operator():
    op = operators.get("gemm+geglu")
    assert isinstance(op, GemmEpilogueOperator) and op.name == "gemm+geglu"
    assert op.epilogue == Epilogue.parse(("geglu",)) and op.epilogue.gate == "geglu" and not op.epilogue.swiglu
    assert op.torch_schema == "(Tensor a, Tensor b) -> Tensor"
    assert operators.get("gemm+geglu+residual").torch_schema == "(Tensor a, Tensor b, Tensor residual) -> Tensor"
    assert op.family.b_tiles == 2 and not op.family.reads_tile and not op.family.ws_refusal
    assert "GeGLU (gelu_tanh(gate) * up)" in op.epilogue.text


@pytest.mark.parametrize("name, message", [
    ("gemm+bias+geglu", "geglu takes neither bias nor scale"),
    ("gemm+scale+geglu", "geglu takes neither bias nor scale"),
    ("gemm+swiglu+geglu", "one activation at most, got swiglu and geglu"),
    ("gemm+gelu_tanh+geglu", "one activation at most, got gelu_tanh and geglu"),
    ("gemm+residual+geglu", "canonical order: geglu\\+residual"),
])
def test_bad_names_are_refused(name, message):
    with pytest.raises(ValueError, match=message):
        operators.get(name)


def test_shapes_inputs_and_counts_are_swiglus():
    op, swiglu = OPS["gemm+geglu"], operators.get("gemm+swiglu")
    problem = op.problem((5, 6, 7), "fp16")
    assert op.tensor_shapes(problem) == swiglu.tensor_shapes(swiglu.problem((5, 6, 7), "fp16")) \
        == [(5, 7), (7, 12), (5, 6)]  # B[K, 2N]: the gate's N columns, then the up projection's
    a, b = op.make_inputs(problem, 1, device="cpu")
    assert (tuple(a.shape), tuple(b.shape), tuple(op.empty_output(a, b).shape)) == ((5, 7), (7, 12), (5, 6))
    big = op.problem((64, 100, 32), "bf16")
    assert op.flops(big) == swiglu.flops(swiglu.problem((64, 100, 32), "bf16")) == 2 * 64 * 200 * 32
    assert op.bytes(big) == (64 * 32 + 32 * 200 + 64 * 100) * 2


def test_the_reference_gates_with_gelu_tanh():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 9, generator=gen).half(), torch.randn(9, 24, generator=gen).half()
    p = a.float() @ b.float()
    ref = Epilogue.parse(("geglu",)).reference(a, b)
    torch.testing.assert_close(ref, _gelu_tanh(p[:, :12]) * p[:, 12:], rtol=1e-5, atol=1e-5)
    # another gate would not pass for it: SiLU (SwiGLU) and exact GELU both differ
    assert _rel(Epilogue.parse(("swiglu",)).reference(a, b), ref) > 1e-2
    assert float((torch.nn.functional.gelu(p[:, :12]) * p[:, 12:] - ref).abs().max()) > 1e-4
    eager = Epilogue.parse(("geglu",)).eager(a.float(), b.float())
    assert _rel(eager, ref) < 1e-6


def test_the_baselines_are_eager_and_torch_compile_of_the_two_matmul_code():
    op = OPS["gemm+geglu"]
    problem = op.problem(RAGGED, "fp32")
    names = [b.name for b in op.bench_baselines()]
    assert names == ["eager", "torch_compile"]
    (eager,) = op.baselines()
    assert "GeGLU" in eager.doc and "geglu" in op.tuner_baselines()[0].doc
    inputs = op.make_inputs(problem, 2, device="cpu")
    assert _rel(eager.make(problem)(*inputs), op.reference(*inputs)) < 1e-5


# -- rendered kernels in the interpreter ----------------------------------------------------------------------
# (genes over family.base(), shape, gene values the repair must keep for the case to test what it names)
TARGETED = [
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16), RAGGED, dict(memory="pointer")),
    (dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=32, persistent=True, GROUP_M=4, raster="col"), RAGGED,
     dict(persistent=True, memory="pointer")),
    (dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor", persistent=True, epilogue_subtile=True),
     ALIGNED, dict(memory="host_descriptor", persistent=True, epilogue_subtile=True)),
    (dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, memory="descriptor", num_stages=2), ALIGNED, dict(memory="descriptor")),
    (dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, memory="host_descriptor"), ALIGNED, dict(memory="host_descriptor")),
]


def _cases():
    out = [pytest.param("gemm+geglu", values, shape, keep, None, id=f"targeted{i}")
           for i, (values, shape, keep) in enumerate(TARGETED)]
    out += [pytest.param("gemm+geglu+residual", TARGETED[i][0], TARGETED[i][1], TARGETED[i][2], None,
                         id=f"residual-targeted{i}") for i in (0, 2)]
    for seed in (0, 1):
        for shape in (RAGGED, ALIGNED):
            size = "x".join(map(str, shape))
            out.append(pytest.param("gemm+geglu", None, shape, {}, seed, id=f"random{seed}-{size}"))
    return out


@pytest.mark.parametrize("name, values, shape, keep, seed", _cases())
def test_rendered_kernel_matches_the_reference(name, values, shape, keep, seed):
    op = OPS[name]
    problem = op.problem(shape, "fp16")
    if seed is None:
        raw = op.family.make(op.family.base(**values))
        genome = op.family.repair(raw, problem, HOPPER, np.random.default_rng(0))
        assert {k: genome[k] for k in keep} == keep, f"repair dropped what the case tests: {genome}"
    else:
        genome = op.family.random(np.random.default_rng(seed), problem, INTERPRETED_HOPPER)
    module = load_source(op.render(genome, problem, HOPPER))
    assert _run(module, op, problem) <= op.tolerance(problem), str(genome)


@pytest.fixture(scope="module")
def pointer_module():
    op = OPS["gemm+geglu"]
    genome = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16))
    return load_source(op.render(genome, op.problem(RAGGED, "fp16"), HOPPER))


def test_the_kernel_gates_with_gelu_tanh_and_keeps_gate_and_up_apart(pointer_module):
    op = OPS["gemm+geglu"]
    problem = op.problem(RAGGED, "fp16")
    a, b = op.make_inputs(problem, 4, device="cpu")
    c = pointer_module.matmul(a, b)
    assert tuple(c.shape) == (37, 50) and c.dtype == torch.float16
    ref = op.reference(a, b)
    assert _rel(c, ref) <= op.tolerance(problem)
    assert _rel(c, operators.get("gemm+swiglu").reference(a, b)) > 5 * op.tolerance(problem)  # not SiLU's gate
    swapped = torch.cat([b[:, 50:], b[:, :50]], dim=1).contiguous()
    assert _rel(pointer_module.matmul(a, swapped), ref) > 0.1


def test_an_odd_b_and_a_full_width_out_are_refused(pointer_module):
    a = torch.randn(37, 40, dtype=torch.float16)
    with pytest.raises(ValueError, match="GeGLU needs B\\[K, 2N\\].*B has 101 columns"):
        pointer_module.matmul(a, torch.randn(40, 101, dtype=torch.float16))
    with pytest.raises(ValueError, match="out must be a contiguous 37x50"):
        pointer_module.matmul(a, torch.randn(40, 100, dtype=torch.float16),
                              out=torch.empty(37, 100, dtype=torch.float16))
    with pytest.raises(ValueError, match="K=0.*a fused epilogue needs K > 0"):
        pointer_module.matmul(torch.empty(37, 0, dtype=torch.float16), torch.empty(0, 100, dtype=torch.float16))


def test_the_rendered_module_sets_the_geglu_switch():
    op = OPS["gemm+geglu"]
    genome = op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory="host_descriptor"))
    module = load_source(op.render(genome, op.problem(ALIGNED, "fp16"), HOPPER))
    assert {k: module.CONFIG[k] for k in ("SCALE", "BIAS", "ACTIVATION", "SWIGLU", "GEGLU", "RESIDUAL")} == {
        "SCALE": False, "BIAS": False, "ACTIVATION": "", "SWIGLU": False, "GEGLU": True, "RESIDUAL": False}
    doc = " ".join(module.__doc__.split())
    assert "gelu_tanh(A @ B[:, :N]) * (A @ B[:, N:])" in doc and "fused epilogue: GeGLU (gelu_tanh(gate) * up)" in doc
    assert "def matmul(a, b, out=None):" in op.render(genome, op.problem(ALIGNED, "fp16"), HOPPER)


def test_the_family_keeps_a_gate_out_of_what_it_cannot_combine():
    op = OPS["gemm+geglu"]
    problem = op.problem((2048, 14336, 3584), "bf16")
    g = op.family.make(op.family.base(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, split_k=4))
    assert any("split-K" in r for r in op.family.violations(g, problem, HOPPER))
    gluon = op.family.make(op.family.base(backend="gluon"))
    assert any("GeGLU" in r for r in op.family.violations(gluon, problem, HOPPER))
    seeds = op.family.seeds(problem, HOPPER)
    assert seeds and all(s["backend"] == "triton" and s["split_k"] == 1 for s in seeds)
    from operators.gemm.gluon_source import gluon_source

    with pytest.raises(ValueError, match="no geglu"):
        gluon_source(seeds[0].as_dict(), "t", epilogue=op.epilogue)


# -- the export's self-check ------------------------------------------------------------------------------------
def test_a_rendered_kernel_passes_its_self_check():
    """As evo export appends it: the self-check's reference is the epilogue's, and the kernel passes it."""
    if torch.cuda.is_available():
        pytest.skip("checks the interpreter on CPU tensors; tests/gpu covers the kernels on a GPU")
    assert os.environ.get("TRITON_INTERPRET") == "1"
    op = OPS["gemm+geglu"]
    problem = op.problem((33, 48, 40), "fp16")
    genome = op.family.make(op.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16))
    module = load_source(op.render(genome, problem, HOPPER) + "\n\n" + op.selfcheck_source(problem))
    assert module.SELFCHECK_PARTS == ("geglu",)
    inputs = module.selfcheck_inputs("cpu")
    assert tuple(inputs[1].shape) == (40, 96) and tuple(module.problem_sizes(*inputs)) == problem.sizes
    ref = module.selfcheck_reference(*inputs)
    assert torch.equal(ref, op.reference(*inputs))
    assert torch.equal(module.selfcheck_baseline(*inputs), op.epilogue.eager(*inputs))
    assert _rel(module.matmul(*inputs), ref) <= module.SELFCHECK_TOLERANCE
    swiglu = operators.get("gemm+swiglu").reference(*inputs)
    assert _rel(swiglu, ref) > module.SELFCHECK_TOLERANCE  # the check would catch SiLU's gate
