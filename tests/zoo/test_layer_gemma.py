"""The reference Gemma-2 layer (evo.zoo.layer_gemma): it computes transformers' Gemma2DecoderLayer (same weights,
a sliding and a global layer, the window hiding keys), its roles are the plan's, stand-ins from the operators'
references reproduce it role by role, real evo kernels run it in the Triton interpreter within the layer bench's
tolerance and a wrong attention variant shows, and what does not fit is one line."""

from __future__ import annotations

import pytest
import torch

import operators
from evo.bench.zoo_layer import TOLERANCE
from evo.zoo import layer_problems
from evo.zoo.layer import DecoderLayer
from evo.zoo.layer_gemma import Gemma2DecoderLayer
from evo.zoo.patch import patch, roles_of
from tests.zoo._layer_cases import TINY, TINY_GEMMA2, hidden_states
from tests.zoo._rendered import plan_kernels, rendered

GEMMA = TINY_GEMMA2


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.double() - ref.double()).norm() / ref.double().norm())


def _hf_layer(layer: Gemma2DecoderLayer, index: int, cap: float) -> torch.nn.Module:
    """transformers' Gemma2DecoderLayer of the tiny spec (eager attention) holding `layer`'s weights."""
    tf = pytest.importorskip("transformers")
    from transformers.models.gemma2.modeling_gemma2 import Gemma2DecoderLayer as HFLayer

    s = layer.spec
    config = tf.Gemma2Config(hidden_size=s.hidden_size, intermediate_size=s.intermediate_size,
                             num_attention_heads=s.num_attention_heads, num_key_value_heads=s.num_key_value_heads,
                             head_dim=s.head_dim, vocab_size=s.vocab_size, num_hidden_layers=2,
                             query_pre_attn_scalar=int(s.query_pre_attn_scalar), attn_logit_softcapping=cap,
                             sliding_window=s.sliding_window, rms_norm_eps=s.rms_norm_eps,
                             attn_implementation="eager")
    hf = HFLayer(config, layer_idx=index).eval()
    q, k, v = layer.qkv_proj.weight.split([s.q_size, s.kv_size, s.kv_size])
    gate, up = layer.gate_up_proj.weight.chunk(2)
    weights = {"self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
               "self_attn.o_proj.weight": layer.o_proj.weight, "mlp.gate_proj.weight": gate,
               "mlp.up_proj.weight": up, "mlp.down_proj.weight": layer.down_proj.weight,
               "input_layernorm.weight": layer.input_norm.weight,
               "post_attention_layernorm.weight": layer.post_attention_norm.weight,
               "pre_feedforward_layernorm.weight": layer.pre_feedforward_norm.weight,
               "post_feedforward_layernorm.weight": layer.post_feedforward_norm.weight}
    assert set(weights) == {name for name, _ in hf.named_parameters()}
    hf.load_state_dict(weights)
    return hf


@pytest.mark.parametrize("index", [0, 1], ids=["sliding", "global"])
@pytest.mark.parametrize("cap", [50.0, 0.5])  # Gemma 2's cap, and one the tiny layer's scores reach
def test_it_is_transformers_gemma2_layer(index, cap):
    spec = GEMMA.__class__(**{**GEMMA.__dict__, "attn_logit_softcapping": cap})
    layer = Gemma2DecoderLayer(spec, dtype=torch.float32, init_std=0.2, layer_index=index)
    assert layer.window == (8 if index == 0 else 0)
    hf = _hf_layer(layer, index, cap)
    t = 12  # > the window of 8: the sliding layer's mask hides keys
    x = hidden_states(spec, t)
    cos, sin = layer.rope(t)
    pos = torch.arange(t)[:, None]
    hidden = torch.arange(t)[None, :] > pos
    if layer.window:
        hidden |= torch.arange(t)[None, :] <= pos - layer.window
    mask = torch.zeros(t, t).masked_fill(hidden, torch.finfo(torch.float32).min)[None, None]
    with torch.no_grad():
        theirs = hf(x[None], position_embeddings=(cos[None], sin[None]), attention_mask=mask)[0]
    assert _rel(layer(x), theirs) < 1e-5
    if index == 0:  # the window matters here: the global layer's output differs
        other = Gemma2DecoderLayer(spec, dtype=torch.float32, init_std=0.2, layer_index=1)
        assert _rel(other(x), theirs) > 1e-3


@pytest.mark.filterwarnings("ignore:.*flex_attention")  # uncompiled on the CPU: the scores materialised
@pytest.mark.parametrize("index", [0, 1], ids=["sliding", "global"])
@pytest.mark.parametrize("context, tokens", [(0, 12), (6, 5)])
def test_flex_attention_is_the_eager_path(index, context, tokens):
    """The torch layer's FlexAttention (the cap a score_mod, the window a block mask) computes the eager layer."""
    def layer(attention):
        return Gemma2DecoderLayer(GEMMA, dtype=torch.float32, init_std=0.2, layer_index=index, context=context,
                                  max_tokens=12, attention=attention)

    eager, flex = layer("eager"), layer("flex")
    x = hidden_states(GEMMA, tokens)
    assert _rel(flex(x), eager(x)) < 1e-5 and list(flex._block_masks) == [(tokens, context + tokens)]
    with pytest.raises(ValueError, match="attention must be one of eager, flex"):
        layer("sdpa")


def test_roles_are_the_plan_s():
    """The plan's roles but cache_attention, the decode step's (a forward pass attends with the attention roles; the
    layer bench's decode loop does not run Gemma-2 layers)."""
    plan = {p.role for p in layer_problems(GEMMA, [4, 32], context=8) if p.searchable and p.scope == "layer"}
    plan.discard("cache_attention")
    assert plan == set(roles_of(Gemma2DecoderLayer(GEMMA, context=8)))
    assert set(roles_of(Gemma2DecoderLayer(GEMMA, context=8, layer_index=1))) == plan - {"attention_local"}
    assert "attention_local" in plan and "norm" not in plan


def _norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def _stand_ins() -> dict:
    """Role -> the operator's fp32 reference in its operand order (the norms: the fp32 formula, weight 1 + w)."""
    plan = {p.role: p.operator for t in (4, 32) for p in layer_problems(GEMMA, [t], context=8)
            if p.scope == "layer" and p.searchable and p.role not in ("rope", "cache_attention")}
    ops = {}
    for role, name in plan.items():
        op = operators.get(name)
        if name.startswith("attention"):  # its scale, query_pre_attn_scalar ** -0.5, is the reference's here
            ops[role] = lambda q, k, v, scale, op=op: op.reference(q, k, v).to(q.dtype)
        elif name.startswith("linear+rmsnorm"):
            ops[role] = lambda x, w, nw, eps, op=op: op.reference(x, w, nw).to(x.dtype)
        elif name.startswith(("linear", "gemm")):
            ops[role] = lambda a, b, op=op: op.reference(a, b).to(a.dtype)
    ops["post_norm"] = _norm
    ops["add_norm"] = lambda x, r, w, eps: (_norm(x + r, w, eps), x + r)
    return ops


@pytest.mark.parametrize("tokens", [4, 32])
def test_stand_ins_reproduce_the_layer(tokens):
    layer = Gemma2DecoderLayer(GEMMA, dtype=torch.float32, init_std=0.2, context=8, max_tokens=32)
    x = hidden_states(GEMMA, tokens)
    ref = layer(x)
    ops = _stand_ins()
    assert set(ops) == set(roles_of(layer)) - {"rope"}
    for role in ops:
        assert _rel(patch(layer, {role: ops[role]})(x), ref) < 1e-5, role
    patch(layer, ops)
    assert _rel(layer(x), ref) < 1e-5


def test_a_gate_up_op_that_gates_itself_is_taken_as_is():
    """An op returning the activation ([T, inter], as a gemm+geglu epilogue would) is not gated again."""
    layer = Gemma2DecoderLayer(GEMMA, dtype=torch.float32, init_std=0.2)
    x = hidden_states(GEMMA, 20)
    ref = layer(x)

    def geglu(a, b):
        gate, up = (a @ b).chunk(2, dim=-1)
        return torch.nn.functional.gelu(gate, approximate="tanh") * up

    assert _rel(patch(layer, {"gate_up": geglu})(x), ref) < 1e-5
    assert _rel(patch(layer, {"gate_up": lambda a, b: torch.nn.functional.silu(geglu(a, b))})(x), ref) > 1e-3


@pytest.mark.parametrize("tokens", [1, 4, 20])
def test_evo_kernels_run_the_gemma_layer(tokens):
    """Every role of the plan at this T as an evo kernel (the interpreter, fp16; the norms take 1 + weight in fp32):
    within the layer bench's tolerance; the window's variant swapped for the global one shows where it hides keys."""
    ops = plan_kernels(GEMMA, tokens, "fp16", 6, skip=("cache_attention",))
    plain = Gemma2DecoderLayer(GEMMA, dtype=torch.float16, init_std=0.2, context=6, max_tokens=20)
    patched = patch(Gemma2DecoderLayer(GEMMA, dtype=torch.float16, init_std=0.2, context=6, max_tokens=20), ops)
    x = hidden_states(GEMMA, tokens, torch.float16)
    ref = plain(x)
    assert _rel(patched(x), ref) <= TOLERANCE["fp16"]
    if "attention_local" in ops:  # 6 + T > 8 keys
        problem = next(p for p in layer_problems(GEMMA, [tokens], "fp16", 6) if p.role == "attention")
        patch(patched, {**ops, "attention_local": rendered(problem.operator, problem.sizes, "fp16")})
        assert _rel(patched(x), ref) > TOLERANCE["fp16"]


def test_what_does_not_fit_is_one_line():
    with pytest.raises(ValueError, match="Gemma2DecoderLayer builds a Gemma-2 layer"):
        Gemma2DecoderLayer(TINY)
    with pytest.raises(ValueError, match="layer_index must be an integer >= 0"):
        Gemma2DecoderLayer(GEMMA, layer_index=-1)
    with pytest.raises(ValueError, match="build it with evo.zoo.layer_gemma.Gemma2DecoderLayer"):
        DecoderLayer(GEMMA)
