"""Routing a reference layer's roles through kernel callables (evo.zoo.patch): the roles agree with the kernel
plan (evo.zoo.problems), stand-ins built from each operator's own reference reproduce the layer, a wrong op is
caught, weights are transposed once, refusals change nothing, unpatch restores torch, torch.compile traces it,
and real evo kernels rendered for the tiny model's problems run the layer in the Triton interpreter."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

import operators
from evo.api import as_torch_op
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from evo.zoo import layer_problems
from evo.zoo.layer import DecoderLayer, LMHead
from evo.zoo.patch import patch, roles_of, unpatch
from tests.zoo._layer_cases import GELU, GELU_TANH, QWEN2, SPECS, TINY, hidden_states

NORM_ROLE = "norm"  # evo.zoo.problems' name of the role, as patch calls it


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).norm() / ref.double().norm())


def _norm_op(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _stand_ins(spec, tokens: int = 8) -> dict:
    """Role -> a pure-torch op computing that role's operator (as the kernel plan names it) with the operator's
    own fp32 reference, in the operator's operand order."""
    def from_reference(name):
        op = operators.get(name)
        return lambda a, b, *rest: op.reference(a, b, *rest).to(a.dtype)

    plan = {p.role: p.operator for p in layer_problems(spec, [tokens], linear_max_tokens=0)
            if p.scope == "layer" and p.searchable}
    ops = {("norm" if role == NORM_ROLE else role): from_reference(name) for role, name in plan.items()}
    ops["norm"] = _norm_op
    return ops


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_roles_are_the_kernel_plan_s(spec):
    """The roles of a layer with a KV cache are those the plan gives it at a decode and a prefill token count."""
    plan = [p for p in layer_problems(spec, [4, 32], context=8) if p.searchable]
    layer_roles = {"norm" if p.role == NORM_ROLE else p.role for p in plan if p.scope == "layer"}
    assert set(roles_of(DecoderLayer(spec, context=8))) == layer_roles
    assert set(roles_of(DecoderLayer(spec))) == layer_roles - {"rope", "cache_attention"}  # no cache: neither
    head_roles = {p.role for p in plan if p.scope == "model"} | {"norm"}  # the final norm is a layer norm's shape
    assert set(roles_of(LMHead(spec))) == head_roles == {"norm", "lm_head", "linear_lm_head", "sampling_softmax"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_stand_ins_reproduce_the_layer(spec):
    layer = DecoderLayer(spec, dtype=torch.float32)
    x = hidden_states(spec, 8)
    ref = layer(x)
    ops = _stand_ins(spec)
    for role in ops:  # each role alone, then all together
        assert _rel(patch(layer, {role: ops[role]})(x), ref) < 1e-6, role
        assert layer.patched_roles() == (role,)
    assert patch(layer, ops) is layer and set(layer.patched_roles()) == set(ops)
    assert _rel(layer(x), ref) < 1e-6
    head = LMHead(spec, dtype=torch.float32)
    logits, probs = head(ref), head.probabilities(ref)
    assert torch.allclose(probs.sum(dim=1), torch.ones(8))
    patch(head, {"norm": _norm_op, "lm_head": lambda a, b: operators.get("gemm").reference(a, b).to(a.dtype),
                 "sampling_softmax": lambda x: operators.get("softmax").reference(x).to(x.dtype)})
    assert _rel(head(ref), logits) < 1e-6 and _rel(head.probabilities(ref), probs) < 1e-6


def test_bf16_stand_ins_stay_close_to_the_bf16_layer():
    """In bf16 the fused epilogues round once where torch rounds after each op: close, not equal."""
    layer = DecoderLayer(TINY)
    x = hidden_states(TINY, 8, torch.bfloat16)
    ref = layer(x)
    assert _rel(patch(layer, _stand_ins(TINY))(x), ref) < 2e-2


@pytest.mark.parametrize("spec, role, wrong", [
    (TINY, "o_proj", lambda a, b, residual: a @ b),  # the residual dropped
    (TINY, "down", lambda a, b, residual: a @ b + 2 * residual),
    (TINY, "gate_up", lambda a, b: torch.nn.functional.silu(a @ b[:, b.shape[1] // 2:]) * (a @ b[:, :b.shape[1] // 2])),
    (QWEN2, "qkv", lambda a, b, bias: a @ b),  # the QKV bias dropped
    (GELU, "down", lambda a, b, bias, residual: a @ b + residual),  # the MLP's down bias dropped
    (GELU, "up", lambda a, b, bias: torch.nn.functional.gelu(a @ b + bias, approximate="tanh")),
    (GELU_TANH, "norm", lambda x, weight, eps: _norm_op(x, torch.ones_like(weight), eps)),
], ids=["o_proj-no-residual", "down-residual-twice", "gate_up-halves-swapped", "qkv-no-bias", "down-no-bias",
        "up-wrong-gelu", "norm-no-weight"])
def test_the_comparison_catches_a_wrong_op(spec, role, wrong):
    # weights of std 0.2: with the default 0.02 the GELU's inputs are so small that exact and tanh GELU agree
    layer = DecoderLayer(spec, dtype=torch.float32, init_std=0.2)
    x = hidden_states(spec, 8)
    ref = layer(x)
    right = _rel(patch(layer, {role: _stand_ins(spec)[role]})(x), ref)
    bad = _rel(patch(layer, {role: wrong})(x), ref)
    assert right < 1e-6 and bad > 1e-4, (right, bad)


def test_weights_are_transposed_once_and_calls_are_recorded():
    layer = DecoderLayer(QWEN2, dtype=torch.float32)
    calls: list[tuple[str, tuple]] = []

    def recording(role, op):
        def call(*args):
            calls.append((role, args))
            return op(*args)
        return call

    patch(layer, {role: recording(role, op) for role, op in _stand_ins(QWEN2).items()})
    for role, linear in (("qkv", layer.qkv_proj), ("o_proj", layer.o_proj), ("gate_up", layer.gate_up_proj),
                         ("down", layer.down_proj)):
        b = getattr(layer, f"{role}_b")
        assert b.is_contiguous() and torch.equal(b, linear.weight.t())
        assert f"{role}_b" not in layer.state_dict()  # not saved: made from the weight at patch time
    layer(hidden_states(QWEN2, 8))
    first = list(calls)
    layer(hidden_states(QWEN2, 3))
    assert [role for role, _ in first] == ["norm", "qkv", "attention", "o_proj", "norm", "gate_up", "down"]
    for (role, args), (_, again) in zip(first, calls[len(first):], strict=True):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if role == "attention":  # q, k, v as [1, heads, T, head_dim] views of the projection: the head dim dense
            assert [t.shape[:3] for t in args] == [(1, 6, 8), (1, 2, 8), (1, 2, 8)]
            assert all(t.stride(-1) == 1 for t in args)
            continue
        if role != "norm":  # B is the same tensor in every call: nothing transposes per call
            assert args[1] is getattr(layer, f"{role}_b") and again[1] is args[1]
        assert all(t.is_contiguous() for t in tensors), role
    by_role = {role: args for role, args in first}
    assert by_role["qkv"][2] is layer.qkv_proj.bias and len(by_role["qkv"]) == 3
    assert len(by_role["o_proj"]) == 3 and len(by_role["gate_up"]) == 2 and len(by_role["down"]) == 3
    assert by_role["norm"][2] == layer.input_norm.eps


def test_refusals_change_nothing_and_unpatch_restores_torch():
    layer = DecoderLayer(TINY, dtype=torch.float32)
    x = hidden_states(TINY, 5)
    ref = layer(x)
    patch(layer, {"o_proj": lambda a, b, residual: a @ b})
    roles = "norm, qkv, o_proj, down, gate_up, attention, linear_qkv, linear_o_proj, linear_gate_up, linear_down"
    for ops, message in [({"up": _norm_op}, f"no role 'up'; its roles are {roles}"),
                         ({"lm_head": _norm_op}, "has no role 'lm_head'"),
                         ({"qkv": "kernel.py"}, "for role 'qkv' is not callable")]:
        with pytest.raises(ValueError, match=message):
            patch(layer, ops)
        assert layer.patched_roles() == ("o_proj",) and hasattr(layer, "o_proj_b")
    with pytest.raises(ValueError, match="takes a DecoderLayer or an LMHead"):
        patch(torch.nn.Linear(2, 2), {})
    assert unpatch(layer) is layer and layer.patched_roles() == () and not hasattr(layer, "o_proj_b")
    assert torch.equal(layer(x), ref)
    patch(layer, {"down": _stand_ins(TINY)["down"]})  # a new patch replaces the old one
    assert layer.patched_roles() == ("down",) and not hasattr(layer, "o_proj_b")


def test_torch_compile_traces_the_patched_layer():
    layer = patch(DecoderLayer(GELU, dtype=torch.float32), _stand_ins(GELU))
    x = hidden_states(GELU, 6)
    compiled = torch.compile(layer, backend="eager", fullgraph=True)  # traced by dynamo without a graph break
    assert _rel(compiled(x), unpatch(DecoderLayer(GELU, dtype=torch.float32))(x)) < 1e-6


# -- real evo kernels, in the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1) --------------------
def _kernel(name: str, sizes: tuple[int, ...], dtype: str, **genes):
    """Operator `name` rendered for `sizes` (a genome from `genes`, repaired to fit) as evo.api.load returns an
    exported module: a torch op, which in eager code calls the kernel's launcher."""
    op = operators.get(name)
    problem = op.problem(sizes, dtype)
    genome = op.family.repair(op.family.make(op.family.base(**genes)), problem, HOPPER, np.random.default_rng(0))
    source = op.render(genome, problem, HOPPER)
    tag = hashlib.sha256(source.encode()).hexdigest()[:16]
    return as_torch_op(getattr(load_source(source), op.entry), op, tag=tag)


def _tiny_kernels(tokens: int, dtype: str) -> dict:
    """Role -> an evo kernel rendered for that role's problem in the tiny model's kernel plan at `tokens`."""
    ops = {}
    for p in layer_problems(TINY, [tokens], dtype, linear_max_tokens=0):
        if p.scope == "layer" and p.searchable:
            genes = {"rmsnorm": {}, "attention+causal": dict(BLOCK_M=16, BLOCK_N=16, num_warps=2)}.get(
                p.operator, dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16))
            ops["norm" if p.role == NORM_ROLE else p.role] = _kernel(p.operator, p.sizes, dtype, **genes)
    assert set(ops) == {"norm", "qkv", "o_proj", "gate_up", "down"} | ({"attention"} if dtype != "fp32" else set())
    return ops


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_evo_kernels_run_the_tiny_head(dtype):
    tokens, torch_dtype = 8, {"fp32": torch.float32, "fp16": torch.float16}[dtype]
    head = LMHead(TINY, dtype=torch_dtype, init_std=0.2)
    x = hidden_states(TINY, tokens, torch_dtype)
    ref = LMHead(TINY, dtype=torch.float32, init_std=0.2)
    logits, probs = ref(x.float()), ref.probabilities(x.float())
    plan = {p.role: p for p in layer_problems(TINY, [tokens], dtype, linear_max_tokens=0)}
    ops = {role: _kernel(plan[role].operator, plan[role].sizes, dtype, **genes) for role, genes in
           [("lm_head", dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=16)), ("sampling_softmax", {})]}
    ops["norm"] = _kernel("rmsnorm", plan[NORM_ROLE].sizes, dtype)  # the final norm has the layer norms' shape
    patch(head, ops)
    tolerance = 1e-5 if dtype == "fp32" else 5e-3
    assert _rel(head(x), logits) < tolerance and _rel(head.probabilities(x), probs) < tolerance
    softmax = ops["sampling_softmax"]  # a softmax at temperature 1/2 is caught
    patch(head, {**ops, "sampling_softmax": lambda z: softmax((2 * z).contiguous())})
    assert _rel(head.probabilities(x), probs) > 100 * tolerance


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's sigmoid of large negatives
def test_evo_kernels_run_the_tiny_layer(dtype):
    tokens = 8
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype]
    # std 0.2: the MLP's and attention's share of the output is then large enough for a wrong kernel to show
    layer = DecoderLayer(TINY, dtype=torch_dtype, init_std=0.2)
    x = hidden_states(TINY, tokens, torch_dtype)
    ref = DecoderLayer(TINY, dtype=torch.float32, init_std=0.2)(x.float())  # the same weights, in fp32
    ops = _tiny_kernels(tokens, dtype)
    tolerance = 1e-5 if dtype == "fp32" else 5e-3
    assert _rel(patch(layer, {"gate_up": ops["gate_up"]})(x), ref) < tolerance
    assert _rel(patch(layer, ops)(x), ref) < tolerance
    unpatched = _rel(unpatch(layer)(x), ref)
    assert unpatched < tolerance
    # and the check can fail: the SwiGLU kernel given the halves swapped is far off
    swapped = ops["gate_up"]
    patch(layer, {"gate_up": lambda a, b: swapped(a, torch.cat(b.chunk(2, dim=1)[::-1], dim=1).contiguous())})
    assert _rel(layer(x), ref) > 100 * tolerance


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")
def test_torch_compile_runs_evo_kernels_as_custom_ops():
    """fullgraph: no graph break; aot_eager: the ops' fake implementations give AOTAutograd the output shapes."""
    from torch._dynamo.testing import CompileCounterWithBackend

    layer = patch(DecoderLayer(TINY, dtype=torch.float32, init_std=0.2), _tiny_kernels(8, "fp32"))
    x = hidden_states(TINY, 8)
    ref = DecoderLayer(TINY, dtype=torch.float32, init_std=0.2)(x)
    counter = CompileCounterWithBackend("aot_eager")
    assert _rel(torch.compile(layer, backend=counter, fullgraph=True)(x), ref) < 1e-5
    traced = [str(n.target) for n in counter.graphs[0].graph.nodes if str(n.target).startswith("evo.")]
    assert counter.frame_count == 1 and [t.split(".")[1].rsplit("_", 1)[0] for t in traced] == \
        ["rmsnorm", "gemm", "gemm_residual", "rmsnorm", "gemm_swiglu", "gemm_residual"]


@pytest.mark.parametrize("tokens, genes", [(1, dict(pack_gqa=True, kv_split=4, reduce="last_program")),
                                           (3, dict(pack_gqa=False, kv_split=2)),
                                           (2, dict(kv_load="tma"))])  # descriptors over the static cache's strides
def test_an_evo_attention_kernel_runs_the_tiny_layer_over_a_kv_cache(tokens, genes):
    context = 45
    layer = DecoderLayer(TINY, dtype=torch.float16, init_std=0.2, context=context)
    ref = DecoderLayer(TINY, dtype=torch.float32, init_std=0.2, context=context)
    x = hidden_states(TINY, tokens, torch.float16)
    plan = {p.role: p for p in layer_problems(TINY, [tokens], "fp16", context=context)}
    assert plan["attention"].sizes == (1, 4, 2, tokens, context + tokens, 16)
    op = _kernel("attention+causal", plan["attention"].sizes, "fp16", BLOCK_M=16, BLOCK_N=16, num_warps=2, **genes)
    qkv = ref.qkv_proj(ref.input_norm(x.float()))
    want = ref.attention(qkv)
    patch(layer, {"attention": op})
    assert _rel(layer.attention(qkv.half()), want) < 5e-3
    assert _rel(layer(x), ref(x.float())) < 5e-3


def test_torch_compile_traces_the_attention_op_over_a_kv_cache():
    from torch._dynamo.testing import CompileCounterWithBackend

    layer = DecoderLayer(TINY, dtype=torch.float16, init_std=0.2, context=30)
    ref = layer(hidden_states(TINY, 2, torch.float16))
    sizes = next(p.sizes for p in layer_problems(TINY, [2], "fp16", context=30) if p.role == "attention")
    patch(layer, {"attention": _kernel("attention+causal", sizes, "fp16", BLOCK_M=16, BLOCK_N=16, num_warps=2,
                                       pack_gqa=True)})
    counter = CompileCounterWithBackend("aot_eager")
    assert _rel(torch.compile(layer, backend=counter, fullgraph=True)(hidden_states(TINY, 2, torch.float16)),
                ref) < 5e-3
    traced = [str(n.target) for n in counter.graphs[0].graph.nodes if str(n.target).startswith("evo.")]
    assert counter.frame_count == 1 and [t.split(".")[1].rsplit("_", 1)[0] for t in traced] == ["attention_causal"]
