"""The fused-epilogue spec (operators/gemm/epilogue.py): parsing a name suffix, its parts and operands, the exact
reference against hand-written torch, and the eager baseline against the reference."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F

from operators.gemm import tile_store
from operators.gemm.epilogue import ACTIVATIONS, PARTS, Epilogue

CANONICAL = ["bias", "gelu", "bias+gelu", "gelu_tanh", "silu+residual", "scale+bias+relu+residual", "swiglu",
             "swiglu+residual", "scale", "residual", "scale+silu", "bias+gelu_tanh+residual"]


@pytest.mark.parametrize("name", CANONICAL)
def test_parse_accepts_canonical_spellings_and_round_trips_the_name(name):
    ep = Epilogue.parse(tuple(name.split("+")))
    assert ep.name == name and ep.parts == tuple(name.split("+"))
    assert Epilogue.parse(list(name.split("+"))) == ep  # a list works as well as a tuple
    assert Epilogue.parse(ep.parts) == ep


def test_parse_sets_the_fields():
    ep = Epilogue.parse(("scale", "bias", "relu", "residual"))
    assert (ep.scale, ep.bias, ep.activation, ep.swiglu, ep.residual) == (True, True, "relu", False, True)
    ep = Epilogue.parse(("swiglu",))
    assert (ep.scale, ep.bias, ep.activation, ep.swiglu, ep.residual) == (False, False, None, True, False)
    assert Epilogue.parse(()) == Epilogue() and Epilogue().name == ""


@pytest.mark.parametrize("parts, message", [
    (("gleu",), "unknown epilogue part 'gleu'"),
    (("bias", "tanh"), "unknown epilogue part 'tanh'"),
    (("bias", "bias"), "named twice"),
    (("gelu", "gelu"), "named twice"),
    (("gelu", "silu"), "one activation at most, got gelu and silu"),
    (("relu", "swiglu"), "one activation at most, got relu and swiglu"),
    (("bias", "swiglu"), "swiglu takes neither bias nor scale"),
    (("scale", "swiglu"), "swiglu takes neither bias nor scale"),
    (("scale", "swiglu", "residual"), "swiglu takes neither bias nor scale"),
])
def test_parse_refuses_bad_suffixes(parts, message):
    with pytest.raises(ValueError, match=message):
        Epilogue.parse(parts)


@pytest.mark.parametrize("parts, canonical", [
    (("gelu", "bias"), "bias+gelu"),
    (("bias", "scale"), "scale+bias"),
    (("residual", "silu"), "silu+residual"),
    (("relu", "residual", "bias", "scale"), "scale+bias+relu+residual"),
    (("residual", "swiglu"), "swiglu+residual"),
])
def test_parse_refuses_non_canonical_order_naming_the_canonical_spelling(parts, canonical):
    with pytest.raises(ValueError, match="canonical order") as refused:
        Epilogue.parse(parts)
    assert str(refused.value).endswith(canonical)


def test_the_unknown_part_message_lists_every_part():
    with pytest.raises(ValueError) as refused:
        Epilogue.parse(("bias", "softplus"))
    assert all(p in str(refused.value) for p in PARTS)


@pytest.mark.parametrize("name, operands", [
    ("bias+gelu", ("bias",)), ("swiglu", ()), ("gelu", ()), ("silu+residual", ("residual",)),
    ("scale+bias+relu+residual", ("bias", "residual", "scale")), ("scale+residual", ("residual", "scale")),
    ("scale", ("scale",)), ("swiglu+residual", ("residual",)),
])
def test_operands_are_bias_residual_then_scale(name, operands):
    ep = Epilogue.parse(tuple(name.split("+")))
    assert ep.operands == operands
    assert ep.kernel_params() == ", ".join({"bias": "bias_ptr", "residual": "residual_ptr", "scale": "scale"}[o]
                                           for o in operands)


def test_text_and_the_kernel_follow_the_parts():
    ep = Epilogue.parse(("scale", "bias", "gelu", "residual"))
    assert ep.text == "scale, + bias, GELU (erf), + residual"
    assert set(ACTIVATIONS) == {"gelu", "gelu_tanh", "silu", "relu"}
    # the Triton kernel's epilogue: every activation, and the parts in the reference's order
    epilogue = inspect.getsource(tile_store._epilogue.fn)
    assert all(f'ACTIVATION == "{name}"' in epilogue for name in ACTIVATIONS)
    steps = ("if SCALE:", "if BIAS:", 'if ACTIVATION == "gelu"', "if RESIDUAL:\n        ep_mask")
    order = [epilogue.index(s) for s in steps]
    assert order == sorted(order)  # scale, bias, activation, residual


# -- reference and eager ---------------------------------------------------------------------------------
M, N, K = 7, 12, 9


def _operands(ep: Epilogue, dtype=torch.float32, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=gen).to(dtype)
    b = torch.randn(K, 2 * N if ep.swiglu else N, generator=gen).to(dtype)
    args = {"bias": torch.randn(N, generator=gen).to(dtype), "residual": torch.randn(M, N, generator=gen).to(dtype),
            "scale": 0.75}
    return a, b, [args[o] for o in ep.operands], args


def _gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


HAND = {  # the formula of each epilogue written out with plain tensor ops
    "bias+gelu": lambda p, o: _gelu_erf(p + o["bias"]),
    "gelu_tanh": lambda p, o: _gelu_tanh(p),
    "silu+residual": lambda p, o: p * torch.sigmoid(p) + o["residual"],
    "scale+bias+relu+residual": lambda p, o: torch.clamp(0.75 * p + o["bias"], min=0) + o["residual"],
    "swiglu": lambda p, o: p[:, :N] * torch.sigmoid(p[:, :N]) * p[:, N:],
    "swiglu+residual": lambda p, o: p[:, :N] * torch.sigmoid(p[:, :N]) * p[:, N:] + o["residual"],
    "scale+silu": lambda p, o: 0.75 * p * torch.sigmoid(0.75 * p),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_reference_matches_hand_written_torch(name):
    ep = Epilogue.parse(tuple(name.split("+")))
    a, b, operands, args = _operands(ep, torch.float16)  # fp16 inputs: the reference computes in fp32
    ref = ep.reference(a, b, *operands)
    assert ref.dtype == torch.float32 and tuple(ref.shape) == (M, N)
    fp32 = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in args.items()}
    expected = HAND[name](a.float() @ b.float(), fp32)
    torch.testing.assert_close(ref, expected, rtol=1e-5, atol=1e-5)


def test_reference_refuses_the_wrong_number_of_operands():
    ep = Epilogue.parse(("bias", "gelu"))
    a, b, _, args = _operands(ep)
    with pytest.raises(ValueError):
        ep.reference(a, b)
    with pytest.raises(ValueError):
        ep.reference(a, b, args["bias"], args["residual"])


def test_the_activations_differ_from_each_other():
    """A mixed-up activation would not be caught by agreeing with itself: the four give different results."""
    a, b, _, _ = _operands(Epilogue())
    results = [Epilogue(activation=act).reference(a, b) for act in ACTIVATIONS]
    for i in range(len(results)):
        for j in range(i + 1, len(results)):
            assert float((results[i] - results[j]).abs().max()) > 1e-4  # gelu vs gelu_tanh: ~4e-4


@pytest.mark.parametrize("name", CANONICAL)
def test_eager_agrees_with_the_reference(name):
    ep = Epilogue.parse(tuple(name.split("+")))
    a, b, operands, _ = _operands(ep, torch.float32, seed=3)
    ref = ep.reference(a, b, *operands)
    eager = ep.eager(a, b, *operands)
    assert eager.dtype == torch.float32 and eager.shape == ref.shape
    assert float((eager - ref).norm() / ref.norm()) < 1e-2  # bf16-ish; fp32 on the CPU is far closer
    torch.testing.assert_close(eager, ref, rtol=1e-4, atol=1e-4)


def test_eager_keeps_the_inputs_dtype():
    ep = Epilogue.parse(("bias", "gelu"))
    a, b, operands, _ = _operands(ep, torch.bfloat16)
    out = ep.eager(a, b, *operands)
    assert out.dtype == torch.bfloat16
    ref = ep.reference(a, b, *operands)
    assert float((out.float() - ref).norm() / ref.norm()) < 1.5e-2
    # the eager GELU is the exact (erf) one, not the tanh approximation
    assert torch.equal(F.gelu(torch.tensor([1.0])), ep.eager(torch.ones(1, 1), torch.ones(1, 1), torch.zeros(1))[0])
