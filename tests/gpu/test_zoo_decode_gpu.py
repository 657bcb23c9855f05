"""The decode loop on a GPU (evo.bench.zoo_decode): one CUDA graph of one step, replayed for every step of a growing
sequence, gives the eager loop's last output and leaves the length at context + N, four ways. Run on the GPU machine:
    python3 -m pytest tests/gpu/test_zoo_decode_gpu.py -q
(about a minute: the tiny model, torch.compile twice)."""

from __future__ import annotations

import pytest
import torch

from evo.bench.zoo_decode import measure_decode
from evo.zoo import load_model
from evo.zoo.layer import DecoderLayer
from tests.fixtures.tiny_zoo import TINY

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_graph_serves_every_step():
    spec = load_model(TINY)
    plain = DecoderLayer(spec, dtype=torch.bfloat16, device="cuda", context=64)
    other = DecoderLayer(spec, dtype=torch.bfloat16, device="cuda", context=64)  # no zoo: the same layer, twice
    d = measure_decode(plain, other, steps=16, dtype="bf16", device="cuda", tolerance=1.5e-2)
    assert d["failures"] == {}, d["failures"]
    for way in ("eager", "compile", "zoo_eager", "zoo_compile"):
        assert d[f"{way}_ms"] > 0 and d[f"{way}_graph_ms"] > 0
    assert set(d["errors"]) == {"compile", "zoo_eager", "zoo_compile", "eager_graph", "compile_graph",
                                "zoo_eager_graph", "zoo_compile_graph"}
    assert d["within_tolerance"] and d["zoo_vs_torch_graphs"] is not None
