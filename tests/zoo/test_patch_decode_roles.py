"""The decode roles of a patched layer (evo.zoo.patch): the linear roles (T <= 16, nn.Linear's weight read in place,
norms fused) and rope (rope_cache: RoPE and the KV write in one launch). Stand-ins built from each operator's own
reference reproduce the layer and the head; the ops get the weight itself, the tables, start and the whole cache;
the fused norm is not called again; above 16 rows the gemm roles run; a layer a role cannot serve refuses it in one
line; unpatch frees what patch made; the decode loop runs them; real kernels in the Triton interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import operators
from evo.api import as_torch_op
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from evo.zoo import layer_problems
from evo.zoo.decode import DecodeState, decode_step
from evo.zoo.layer import DecoderLayer, LMHead
from evo.zoo.patch import patch, roles_of, unpatch
from operators.rope_cache.torch_code import torch_rope_cache
from tests.zoo._layer_cases import GELU, GELU_TANH, LLAMA, QWEN2, SPECS, TINY, hidden_states

CONTEXT = 8


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).norm() / ref.double().norm())


def _norm_op(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _stand_in(name: str):
    """A pure-torch op computing operator `name` as a patched role calls it."""
    if name == "rope_cache":
        return torch_rope_cache
    if name == "rmsnorm":
        return _norm_op
    if name == "softmax":
        return lambda x: operators.get("softmax").reference(x).to(x.dtype)
    op = operators.get(name)
    if name.startswith("linear"):
        math = op.math
        if math.norm:
            return lambda x, w, *rest: math.reference(x, w, *rest[:-1], eps=rest[-1]).to(x.dtype)
        return lambda x, w, *rest: math.reference(x, w, *rest, eps=0.0).to(x.dtype)
    return lambda a, b, *rest: op.reference(a, b, *rest).to(a.dtype)


def _plan_ops(spec, tokens: int, scope: str = "layer") -> dict:
    return {p.role: _stand_in(p.operator) for p in layer_problems(spec, [tokens], context=CONTEXT)
            if p.scope == scope and p.searchable and p.operator != "attention+causal"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("tokens", [1, 5, 16])
def test_decode_stand_ins_reproduce_the_layer_and_the_head(spec, tokens):
    ref_layer = DecoderLayer(spec, dtype=torch.float32, context=CONTEXT, max_tokens=16)
    layer = DecoderLayer(spec, dtype=torch.float32, context=CONTEXT, max_tokens=16)
    x = hidden_states(spec, tokens)
    ref = ref_layer(x)
    ops = _plan_ops(spec, tokens)
    assert "rope" in ops and any(r.startswith("linear_") for r in ops)
    for role in ops:  # each role alone, then all together
        assert _rel(patch(layer, {role: ops[role]})(x), ref) < 1e-6, role
    assert _rel(patch(layer, ops)(x), ref) < 1e-6
    torch.testing.assert_close(layer.kv_cache, ref_layer.kv_cache)  # rope_cache wrote the new keys and values
    head, ref_head = LMHead(spec, dtype=torch.float32), LMHead(spec, dtype=torch.float32)
    head_ops = _plan_ops(spec, tokens, "model")
    assert set(head_ops) == {"linear_lm_head", "sampling_softmax"}
    patch(head, head_ops)
    assert _rel(head(ref), ref_head(ref)) < 1e-6 and _rel(head.probabilities(ref), ref_head.probabilities(ref)) < 1e-6


def test_the_ops_get_the_weights_tables_start_and_cache_and_the_fused_norm_is_not_called_again():
    layer = DecoderLayer(TINY, dtype=torch.float32, context=CONTEXT, max_tokens=32)
    calls: list[tuple[str, tuple]] = []

    def recording(role, op):
        def call(*args):
            calls.append((role, args))
            return op(*args)
        return call

    gemm = {p.role: _stand_in(p.operator) for p in layer_problems(TINY, [32], context=CONTEXT)
            if p.scope == "layer" and p.searchable and p.operator != "attention+causal"}
    ops = {**gemm, **_plan_ops(TINY, 4)}
    patch(layer, {role: recording(role, op) for role, op in ops.items()})
    for role in ("linear_qkv", "linear_o_proj", "linear_gate_up", "linear_down"):
        assert not hasattr(layer, f"{role}_b")  # no copy of the weight for the linear roles
    assert layer.rope_cos.dtype == torch.float32 and layer.rope_cos.shape == (CONTEXT + 32, TINY.head_dim)
    assert "rope_cos" not in layer.state_dict() and layer.rope_start.dtype == torch.int32
    layer(hidden_states(TINY, 4))
    assert [r for r, _ in calls] == ["linear_qkv", "rope", "linear_o_proj", "linear_gate_up", "linear_down"]
    by_role = dict(calls)
    assert by_role["linear_qkv"][1] is layer.qkv_proj.weight and by_role["linear_qkv"][2] is layer.input_norm.weight
    assert by_role["linear_qkv"][3] == layer.input_norm.eps
    assert by_role["linear_gate_up"][1] is layer.gate_up_proj.weight
    assert by_role["linear_gate_up"][2] is layer.post_attention_norm.weight
    assert by_role["linear_o_proj"][1] is layer.o_proj.weight and by_role["linear_down"][1] is layer.down_proj.weight
    _, cos, sin, cache, start = by_role["rope"]
    assert cos is layer.rope_cos and sin is layer.rope_sin and cache is layer.kv_cache  # the whole cache
    assert start is layer.rope_start and int(start) == CONTEXT
    calls.clear()
    layer(hidden_states(TINY, 32))  # above 16 rows: the gemm roles and the norms apart
    assert [r for r, _ in calls] == ["norm", "qkv", "rope", "o_proj", "norm", "gate_up", "down"]


def test_roles_a_layer_cannot_serve_are_refused_in_one_line_and_unpatch_frees_what_patch_made():
    gelu = DecoderLayer(GELU, dtype=torch.float32)  # no cache
    with pytest.raises(ValueError, match="cannot take role 'rope': it has no KV cache"):
        patch(gelu, {"rope": torch_rope_cache})
    assert "linear_gate_up" not in roles_of(DecoderLayer(GELU_TANH))  # a GELU MLP has no gate_up
    assert gelu.patched_roles() == ()
    layer = DecoderLayer(LLAMA, dtype=torch.float32, context=CONTEXT)
    x = hidden_states(LLAMA, 2)
    ref = layer(x)
    patch(layer, _plan_ops(LLAMA, 2))
    assert hasattr(layer, "rope_cos") and _rel(layer(x), ref) < 1e-6
    unpatch(layer)
    assert not any(hasattr(layer, b) for b in ("rope_cos", "rope_sin", "rope_start"))
    assert torch.equal(layer(x), ref)


@pytest.mark.parametrize("spec", [TINY, QWEN2, GELU], ids=lambda s: s.name)
def test_the_decode_loop_runs_the_linear_and_rope_roles(spec):
    plain = DecoderLayer(spec, dtype=torch.float32, context=CONTEXT, max_tokens=1)
    layer = patch(DecoderLayer(spec, dtype=torch.float32, context=CONTEXT, max_tokens=1), _plan_ops(spec, 1))
    capacity = CONTEXT + 40  # past the layer's own cache: the rope tables grow to it
    state, ref_state = DecodeState.for_layer(layer, capacity), DecodeState.for_layer(plain, capacity)
    assert layer.rope_cos.shape[0] == capacity
    x = hidden_states(spec, 1)
    for _ in range(3):
        torch.testing.assert_close(decode_step(layer, x, state.cache, state.length),
                                   decode_step(plain, x, ref_state.cache, ref_state.length), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.cache, ref_state.cache)
    assert int(state.length) == CONTEXT + 3
    small = DecodeState(torch.zeros(2, 1, spec.num_key_value_heads, capacity + 8, spec.head_dim), state.length)
    with pytest.raises(ValueError, match="the rope role's tables hold"):
        decode_step(layer, x, small.cache, small.length)


# -- real evo kernels, in the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1) --------------------
def _kernel(name: str, sizes: tuple[int, ...], dtype: str):
    """Operator `name`'s first seed rendered for `sizes`, as evo.api.load returns an exported module: a torch op."""
    import hashlib

    op = operators.get(name)
    problem = op.problem(sizes, dtype)
    genome = op.family.seeds(problem, HOPPER)[0]
    genome = op.family.repair(genome, problem, HOPPER, np.random.default_rng(0))
    source = op.render(genome, problem, HOPPER)
    return as_torch_op(getattr(load_source(source), op.entry), op, tag=hashlib.sha256(source.encode()).hexdigest()[:16])


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's sigmoid of large negatives
def test_evo_kernels_run_the_tiny_decode_layer_and_head(dtype):
    tokens = 4
    torch_dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype]
    layer = DecoderLayer(TINY, dtype=torch_dtype, init_std=0.2, context=CONTEXT, max_tokens=tokens)
    ref_layer = DecoderLayer(TINY, dtype=torch.float32, init_std=0.2, context=CONTEXT, max_tokens=tokens)
    x = hidden_states(TINY, tokens, torch_dtype)
    ref = ref_layer(x.float())
    plan = [p for p in layer_problems(TINY, [tokens], dtype, context=CONTEXT) if p.searchable
            and p.operator != "attention+causal"]
    ops = {p.role: _kernel(p.operator, p.sizes, dtype) for p in plan}
    cached = {"cache_attention"} if dtype == "fp16" else set()  # an operator of fp16 and bf16, as attention's
    assert set(ops) == {"linear_qkv", "rope", "linear_o_proj", "linear_gate_up", "linear_down", "linear_lm_head",
                        "sampling_softmax"} | cached
    tolerance = 1e-5 if dtype == "fp32" else 5e-3
    out = patch(layer, {r: op for r, op in ops.items() if r in roles_of(layer)})(x)
    assert _rel(out, ref) < tolerance
    assert _rel(layer.kv_cache.float(), ref_layer.kv_cache) < tolerance  # the kernel's KV write
    if cached:  # the decode loop's attention over the masked cache runs the cache_attention kernel
        state, ref_state = DecodeState.for_layer(layer, CONTEXT + 8), DecodeState.for_layer(ref_layer, CONTEXT + 8)
        y, y_ref = decode_step(layer, x[:1], state.cache, state.length), decode_step(ref_layer, x[:1].float(),
                                                                                     ref_state.cache, ref_state.length)
        assert _rel(y, y_ref) < tolerance
    head, ref_head = LMHead(TINY, dtype=torch_dtype, init_std=0.2), LMHead(TINY, dtype=torch.float32, init_std=0.2)
    patch(head, {r: ops[r] for r in ("linear_lm_head", "sampling_softmax")})
    assert _rel(head(out), ref_head(out.float())) < tolerance
    # and the check can fail: the fused norm given another weight is far off
    linear_qkv = ops["linear_qkv"]
    patch(layer, {**{r: op for r, op in ops.items() if r in roles_of(layer)},
                  "linear_qkv": lambda a, w, nw, eps: linear_qkv(a, w, torch.ones_like(nw), eps)})
    assert _rel(layer(x), ref) > 0.1
