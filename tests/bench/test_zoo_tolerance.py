"""The layer bench's tolerances (evo.bench.zoo_tolerance): a MoE layer's near-tie tokens are found from its own router
logits, two equally correct routers that differ by less than the margin route every other token alike, and the
bench leaves exactly those tokens out (a flipped token would otherwise fail a correct layer; a wrong one still
fails), as the decode loop does with its last step's token; a dense layer has no routing."""

from __future__ import annotations

import copy

import torch

from evo.bench.zoo_decode import decode_markdown, measure_decode
from evo.bench.zoo_layer import measure_layer
from evo.bench.zoo_tolerance import TOLERANCE, reference_and_ties
from evo.evaluate.check import relative_error
from evo.zoo.layer import DecoderLayer
from evo.zoo.layer_moe import MoEDecoderLayer
from tests.zoo._layer_cases import TINY, TINY_MOE, hidden_states

TOKENS = 64


def _tied_layers(eps: float) -> tuple[MoEDecoderLayer, MoEDecoderLayer]:
    """A MoE layer whose experts 0 and 1 have routers eps apart, and a twin with the two swapped: both correct
    (eps far below the dtype's rounding), they route differently exactly where experts 0 and 1 straddle the top k."""
    plain = MoEDecoderLayer(TINY_MOE, dtype=torch.float32, init_std=0.2)
    with torch.no_grad():
        w = plain.router.weight
        w[1] = w[0] + eps * torch.ones_like(w[0])
    twin = copy.deepcopy(plain)
    with torch.no_grad():
        twin.router.weight[[0, 1]] = plain.router.weight[[1, 0]]
    return plain, twin


def _ids(layer: MoEDecoderLayer, x: torch.Tensor) -> torch.Tensor:
    layer.keep_router_logits = True
    with torch.no_grad():
        layer(x)
    ids = layer.route(layer.router_logits)[1].sort(dim=-1).values
    layer.keep_router_logits, layer.router_logits = False, None
    return ids


def test_near_ties_are_the_tokens_a_rounding_can_flip():
    plain, twin = _tied_layers(1e-5)
    x = hidden_states(TINY_MOE, TOKENS)
    ties = reference_and_ties(plain, x, TOLERANCE["fp32"])[1]
    flipped = (_ids(plain, x) != _ids(twin, x)).any(dim=-1)
    assert 0 < int(flipped.sum()) and bool(ties[flipped].all())  # every token the twin routes otherwise is a tie
    assert int(ties.sum()) < TOKENS // 2  # and most tokens are decided
    assert plain.router_logits is None and not plain.keep_router_logits  # the layer is left as it was
    assert int(reference_and_ties(plain, x, 0.0)[1].sum()) < int(ties.sum())  # a narrower margin finds fewer
    assert bool(reference_and_ties(plain, x, 2.0)[1].all())  # and the widest (twice the largest) every token


def test_the_bench_leaves_near_ties_out_and_still_sees_a_wrong_layer():
    plain, twin = _tied_layers(1e-5)
    x = hidden_states(TINY_MOE, TOKENS)
    with torch.no_grad():
        whole = relative_error(twin(x), plain(x))
    assert whole > TOLERANCE["fp32"]  # the flipped tokens alone would fail a correct layer
    row = measure_layer(plain, twin, TOKENS, "fp32", "cpu", seed=1, rounds=1)
    assert row["within_tolerance"] and row["errors"]["zoo_eager"] < 1e-3
    assert row["routing_near_ties"] > 0
    wrong = copy.deepcopy(twin)
    with torch.no_grad():
        wrong.experts_down.mul_(1.1)  # every token's experts off by 10%
    row = measure_layer(plain, wrong, TOKENS, "fp32", "cpu", seed=1, rounds=1)
    assert not row["within_tolerance"]


def test_a_dense_layer_has_no_routing():
    layer = DecoderLayer(TINY, dtype=torch.float32)
    x = hidden_states(TINY, 8)
    ref, ties = reference_and_ties(layer, x, TOLERANCE["fp32"])
    assert ties is None and not hasattr(layer, "keep_router_logits")  # nothing set on a dense layer
    with torch.no_grad():
        assert torch.equal(ref, layer(x))  # the reference is the plain layer's own output


def _decode_layers(tied: bool) -> tuple[MoEDecoderLayer, MoEDecoderLayer]:
    """A MoE layer with a cache of 8 tokens and a twin. tied: every expert's router row is the same but for a 1e-6
    step (any top-k choice is a near tie), the twin's steps in the other order (it takes the other experts)."""
    plain = MoEDecoderLayer(TINY_MOE, dtype=torch.float32, init_std=0.2, context=8, max_tokens=4)
    twin = copy.deepcopy(plain)
    if tied:
        with torch.no_grad():
            w = plain.router.weight
            w.copy_(w[0] + 1e-6 * torch.arange(w.shape[0], dtype=w.dtype)[:, None])
            twin.router.weight.copy_(w.flip(0))
    return plain, twin


def test_the_decode_loop_leaves_a_tied_last_token_out_and_still_sees_a_wrong_layer():
    plain, twin = _decode_layers(tied=True)
    row = measure_decode(plain, twin, steps=3, dtype="fp32", device="cpu", tolerance=TOLERANCE["fp32"], rounds=1)
    assert row["routing_near_tie"] and row["errors"]["zoo_eager"] > TOLERANCE["fp32"]  # the flip alone would fail
    assert row["within_tolerance"] and "near tie" in "\n".join(decode_markdown(row))
    assert plain.router_logits is None and not plain.keep_router_logits  # the layer is left as it was
    plain, twin = _decode_layers(tied=False)
    with torch.no_grad():
        twin.experts_down.mul_(1.1)  # every token's experts off by 10%
    row = measure_decode(plain, twin, steps=3, dtype="fp32", device="cpu", tolerance=TOLERANCE["fp32"], rounds=1)
    assert row["routing_near_tie"] is False and not row["within_tolerance"]
