"""The layer's HBM floor (issue 40, item 5): the bytes a fused decoder layer moves at the least, over a copy
bandwidth, and each way's share of it. The times and the bandwidth here are made-up TEST DATA."""

from __future__ import annotations

import pytest
import torch

from evo.bench.zoo_floor import floor_markdown, floor_shares, layer_floor
from evo.bench.zoo_layer_results import to_markdown
from evo.zoo import load_model
from evo.zoo.layer import DecoderLayer
from tests.fixtures.tiny_zoo import TINY


def test_the_floor_counts_weights_cache_and_activations_once():
    spec = load_model(TINY)
    layer = DecoderLayer(spec, dtype=torch.float16, context=100, max_tokens=4)
    f = layer_floor(layer, 4, copy_GBps=1000.0, gpu="NVIDIA H100 80GB HBM3", dtype="fp16")
    h, inter, qkv = spec.hidden_size, spec.intermediate_size, spec.q_size + 2 * spec.kv_size
    weights = 2 * (h * qkv + spec.q_size * h + h * 2 * inter + inter * h + 2 * h)  # fp16; two norm weights
    assert f["weights_bytes"] == weights
    assert f["kv_bytes"] == 2 * spec.num_key_value_heads * spec.head_dim * (100 + 4) * 2
    assert f["activation_bytes"] == 2 * 4 * h * 2
    assert f["bytes"] == weights + f["kv_bytes"] + f["activation_bytes"]
    assert f["hbm_ms"] == pytest.approx(f["bytes"] / 1e12 * 1e3)
    assert f["peak_tflops"] == 989.0 and f["compute_ms"] == pytest.approx(f["flops"] / 989e12 * 1e3)
    assert layer_floor(layer, 4, None)["hbm_ms"] is None  # no bandwidth measured: no floor
    assert layer_floor(layer, 4, 1000.0, gpu="")["compute_ms"] is None  # no known peak: no compute floor


def test_each_way_s_share_and_the_markdown():
    row = {"tokens": 1, "eager_ms": 0.2, "zoo_eager_graph_ms": 0.05, "compile_ms": None, "tolerance": 0.015,
           "floor": {"weights_bytes": 30e6, "kv_bytes": 1e6, "activation_bytes": 1e3, "bytes": 31.001e6,
                     "copy_GBps": 3000.0, "hbm_ms": 0.01, "flops": 1e8, "peak_tflops": None, "compute_ms": None}}
    row["floor_share"] = floor_shares(row)
    assert row["floor_share"] == {"eager_ms": 0.05, "zoo_eager_graph_ms": 0.2}  # only the ways timed
    text = "\n".join(floor_markdown([row]))
    assert "(3000 GB/s)" in text and "| 1 | 30.0 | 1.00 | 0.001 | 10.0 | - | 5% | - |" in text and "20%" in text
    doc = {"model": "m", "gpu": "TEST DATA", "dtype": "bf16", "zoo_module": "z.py", "roles": {}, "layers": [row]}
    assert "## The layer's HBM floor" in to_markdown(doc)
    assert floor_shares({"eager_ms": 1.0}) == {} and floor_markdown([{"tokens": 1}]) == []
