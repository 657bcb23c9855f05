"""The decode loop (issue 40, item 4; evo.zoo.decode): a fixed-capacity KV cache with the length as a tensor gives the
same result as the reference layer at that context, advances itself, traces once under torch.compile for every step,
and refuses a cache, length or input of the wrong shape, dtype or device in one line."""

from __future__ import annotations

import pytest
import torch

from evo.zoo.decode import DecodeState, decode_step
from evo.zoo.layer import DecoderLayer
from tests.zoo._layer_cases import GELU, LLAMA, QWEN2, TINY, hidden_states


@pytest.mark.parametrize("spec", [TINY, LLAMA, QWEN2, GELU], ids=lambda s: s.name)
@pytest.mark.parametrize("tokens", [1, 3])
def test_a_step_is_the_layer_at_that_context(spec, tokens):
    context = 7
    layer = DecoderLayer(spec, dtype=torch.float32, context=context, max_tokens=tokens)
    state = DecodeState.for_layer(layer, capacity=context + 2 * tokens + 5)
    x = hidden_states(spec, tokens)
    y = decode_step(layer, x, state.cache, state.length)
    assert int(state.length) == context + tokens
    with torch.no_grad():
        ref = layer(x)  # writes the same keys and values after the same context
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(state.cache[:, :, :, :context + tokens], layer.kv_cache[:, :, :, :context + tokens])
    # the next step attends to one more position: the layer with the longer context agrees
    y2 = decode_step(layer, x, state.cache, state.length)
    longer = DecoderLayer(spec, dtype=torch.float32, context=context + tokens, max_tokens=tokens)
    longer.kv_cache[:, :, :, :context + tokens] = state.cache[:, :, :, :context + tokens]
    with torch.no_grad():
        torch.testing.assert_close(y2, longer(x), rtol=1e-5, atol=1e-5)
    assert int(state.length) == context + 2 * tokens


def test_one_compiled_step_serves_every_length():
    from torch._dynamo.testing import CompileCounter

    layer = DecoderLayer(TINY, dtype=torch.float32, context=5)
    state = DecodeState.for_layer(layer, capacity=40)
    counter = CompileCounter()
    step = torch.compile(lambda x, c, n: decode_step(layer, x, c, n, check=False), backend=counter, fullgraph=True)
    x = hidden_states(TINY, 1)
    eager_state = DecodeState.for_layer(layer, capacity=40)
    with torch.no_grad():
        for _ in range(6):
            torch.testing.assert_close(step(x, state.cache, state.length),
                                       decode_step(layer, x, eager_state.cache, eager_state.length))
    assert counter.frame_count == 1 and int(state.length) == 11  # one trace for six lengths
    state.reset(layer)
    assert int(state.length) == 5 and not state.cache[:, :, :, 5:].any()


def test_bad_cache_length_and_input_are_one_line():
    layer = DecoderLayer(TINY, dtype=torch.float32, context=4)
    state = DecodeState.for_layer(layer, capacity=8)
    x = hidden_states(TINY, 1)
    bad = [
        (x[:, :-1], state.cache, state.length, "x must be"),
        (x, state.cache[:, :, :1], state.length, "the KV cache must be"),
        (x, state.cache.double(), state.length, "the KV cache is torch.float64"),
        (x, state.cache, state.length.float(), "the length must be an int32 or int64 tensor"),
        (x, state.cache, torch.tensor(4, dtype=torch.int32), "of shape [1]"),
        (x, state.cache, state.length.to("meta"), "the length is on meta"),
        (x.half(), state.cache, state.length, "x is torch.float16"),
    ]
    for args in bad:
        with pytest.raises(ValueError, match=r"^decode step: ") as e:
            decode_step(layer, *args[:3])
        assert args[3] in str(e.value) and "\n" not in str(e.value), str(e.value)
    with pytest.raises(ValueError, match="capacity must be an integer above the layer's context"):
        DecodeState.for_layer(layer, capacity=4)
