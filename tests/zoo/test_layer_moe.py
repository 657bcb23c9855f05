"""The reference MoE layer (evo.zoo.layer_moe): its roles are the plan's, both torch experts ways agree, the routing
is Mixtral's or Qwen-MoE's, stand-ins from the operators' references reproduce it role by role, real evo kernels
(the moe operators among them) run it in the Triton interpreter within the layer bench's tolerance and a wrong op
shows, a decode step runs its routed MLP, and what does not fit is one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import operators
from evo.bench.zoo_layer import TOLERANCE
from evo.zoo import layer_problems
from evo.zoo.decode import DecodeState, decode_step
from evo.zoo.layer import DecoderLayer
from evo.zoo.layer_moe import MoEDecoderLayer
from evo.zoo.patch import patch, roles_of
from tests.zoo._layer_cases import TINY, TINY_MOE, hidden_states
from tests.zoo._rendered import plan_kernels

QWEN_MOE = dataclasses.replace(TINY_MOE, name="qwen-moe-like", num_experts=6, experts_per_token=3,
                               shared_expert_size=48, norm_topk_prob=False, attention_bias=True)
SPECS = [TINY_MOE, QWEN_MOE]


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).norm() / ref.double().norm())


def _stand_ins(spec) -> dict:
    """Role -> the operator's fp32 reference in its operand order (norm: the fp32 formula)."""
    def ref(name):
        op = operators.get(name)
        return lambda *args: op.reference(*args).to(args[0].dtype)

    plan = {p.role: p.operator for t in (4, 32) for p in layer_problems(spec, [t], context=8)
            if p.scope == "layer" and p.searchable and p.role not in ("rope", "cache_attention")}
    ops = {role: ref(name) for role, name in plan.items()}
    for role in [r for r in ops if r.startswith("linear_") and plan[r].startswith("linear+rmsnorm")]:
        op = operators.get(plan[role])  # the eps last: the reference's default (the layer's)
        ops[role] = lambda x, w, nw, *rest, op=op: op.reference(x, w, nw, *rest[:-1]).to(x.dtype)
    ops["norm"] = lambda x, w, eps: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
                                     * w.float()).to(x.dtype)
    return ops


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_roles_are_the_plan_s(spec):
    plan = {p.role for p in layer_problems(spec, [4, 32], context=8) if p.searchable and p.scope == "layer"}
    assert set(roles_of(MoEDecoderLayer(spec, context=8))) == plan
    assert set(roles_of(MoEDecoderLayer(spec))) == plan - {"rope", "cache_attention"}
    assert {"moe_gate_up", "moe_down", "router", "linear_router"} <= plan
    assert ({"shared_gate_up", "linear_shared_down"} <= plan) == bool(spec.shared_expert_size)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("tokens", [1, 5, 24])
def test_the_loop_and_grouped_mm_agree(spec, tokens):
    """transformers 5's two experts ways compute the same layer (tokens 1: most experts get none)."""
    x = hidden_states(spec, tokens)
    loop = MoEDecoderLayer(spec, dtype=torch.float32, init_std=0.2, context=3, max_tokens=24)
    grouped = MoEDecoderLayer(spec, dtype=torch.float32, init_std=0.2, context=3, max_tokens=24, experts="grouped_mm")
    assert _rel(grouped(x), loop(x)) < 1e-6


def test_routing_is_mixtral_s_or_qwen_s():
    logits = torch.randn(7, 6, generator=torch.Generator().manual_seed(3))
    mixtral = MoEDecoderLayer(dataclasses.replace(QWEN_MOE, norm_topk_prob=True), dtype=torch.float32)
    qwen = MoEDecoderLayer(QWEN_MOE, dtype=torch.float32)
    (w_m, ids_m), (w_q, ids_q) = mixtral.route(logits), qwen.route(logits)
    top = torch.topk(torch.softmax(logits, dim=-1), 3, dim=-1)
    assert torch.equal(ids_m, top.indices) and torch.equal(ids_q, top.indices)
    assert torch.allclose(w_q, top.values) and torch.allclose(w_m.sum(dim=-1), torch.ones(7))
    assert (w_q.sum(dim=-1) < 1).all()


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("tokens", [4, 32])
def test_stand_ins_reproduce_the_layer(spec, tokens):
    layer = MoEDecoderLayer(spec, dtype=torch.float32, init_std=0.2)
    x = hidden_states(spec, tokens)
    ref = layer(x)
    ops = _stand_ins(spec)
    for role in ops:  # each role alone, then all together
        assert _rel(patch(layer, {role: ops[role]})(x), ref) < 1e-5, role
    patch(layer, ops)
    assert _rel(layer(x), ref) < 1e-5


@pytest.mark.parametrize("role, wrong", [
    ("moe_down", lambda h, w, ids, weights: operators.get("moe_down").reference(h, w, ids, torch.ones_like(weights))),
    ("moe_gate_up", lambda x, w, ids: operators.get("moe_gate_up").reference(x, w, ids.flip(-1))),
    ("router", lambda a, b: a @ b.flip(-1)),
], ids=["routing-weights-ignored", "slots-swapped", "experts-renumbered"])
def test_the_comparison_catches_a_wrong_op(role, wrong):
    layer = MoEDecoderLayer(TINY_MOE, dtype=torch.float32, init_std=0.2)
    x = hidden_states(TINY_MOE, 8)
    ref = layer(x)
    assert _rel(patch(layer, {role: _stand_ins(TINY_MOE)[role]})(x), ref) < 1e-5
    assert _rel(patch(layer, {role: wrong})(x), ref) > 1e-3


@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # the interpreter's sigmoid of large negatives
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("tokens", [1, 4, 20])
def test_evo_kernels_run_the_moe_layer(spec, tokens):
    """Every role of the plan at this T as an evo kernel (the interpreter, fp16): within the layer bench's tolerance,
    and a kernel of another routing (the slots of moe_down's weights reversed) outside it."""
    ops = plan_kernels(spec, tokens, "fp16", 6, skip=("cache_attention",))
    assert {"moe_gate_up", "moe_down"} <= set(ops)
    plain = MoEDecoderLayer(spec, dtype=torch.float16, init_std=0.2, context=6, max_tokens=20)
    patched = patch(MoEDecoderLayer(spec, dtype=torch.float16, init_std=0.2, context=6, max_tokens=20), ops)
    x = hidden_states(spec, tokens, torch.float16)
    ref = plain(x)
    assert _rel(patched(x), ref) <= TOLERANCE["fp16"]
    down = ops["moe_down"]
    patch(patched, {**ops, "moe_down": lambda h, w, ids, weights: down(h, w, ids, weights.flip(-1))})
    assert _rel(patched(x), ref) > TOLERANCE["fp16"]


def test_a_decode_step_runs_the_routed_mlp():
    layer = MoEDecoderLayer(QWEN_MOE, dtype=torch.float32, init_std=0.2, context=5, max_tokens=2)
    x = hidden_states(QWEN_MOE, 2)
    state = DecodeState.for_layer(layer, capacity=12)
    assert _rel(decode_step(layer, x, state.cache, state.length), layer(x)) < 1e-5 and int(state.length) == 7


def test_the_floor_counts_the_experts_tokens_reach():
    layer = MoEDecoderLayer(TINY_MOE, dtype=torch.float16)
    expert = (2 * 32 * 64 + 64 * 32) * 2  # one expert's bytes
    one, many = layer.active_weights(1), layer.active_weights(64)
    assert many[0] - one[0] == 2 * expert and many[1] == one[1]  # 2 of 4 experts at T=1; k=2 per token always
    assert many[0] == sum(p.numel() * 2 for p in layer.parameters())


def test_what_does_not_fit_is_one_line():
    with pytest.raises(ValueError, match="a dense MLP; MoEDecoderLayer builds"):
        MoEDecoderLayer(TINY)
    with pytest.raises(ValueError, match="experts must be one of loop, grouped_mm"):
        MoEDecoderLayer(TINY_MOE, experts="dense")
    with pytest.raises(ValueError, match="build it with evo.zoo.layer_moe.MoEDecoderLayer"):
        DecoderLayer(TINY_MOE)
