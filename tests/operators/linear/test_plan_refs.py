"""A linear plan keeps no tensor of the call that made it (without a split the call's own x stands in for the
workspace): a plan that held the first call's input kept an activation alive, under CUDA-graph trees one inside the
graph's pool that no output tracks ("tensor(s) in the cudagraph pool not tracked as outputs"). In the interpreter."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.mark.parametrize("split", [1, 2])
def test_a_plan_keeps_none_of_its_first_calls_tensors(split):
    op = operators.get("linear+residual")
    p = op.problem((1, 64, 128), "fp32")
    genome = next(g for g in op.family.seeds(p, INTERPRETED_HOPPER) if (g.get("SPLIT_K") > 1) == (split > 1))
    module = load_source(op.render(genome, p, INTERPRETED_HOPPER))
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(64, 128, generator=gen)
    x, r = torch.randn(1, 128, generator=gen), torch.randn(1, 64, generator=gen)
    y = module.linear(x, w, r)
    torch.testing.assert_close(y, x @ w.t() + r, rtol=1e-4, atol=1e-4)
    refs = [weakref.ref(t) for t in (x, r, y)]
    del x, r, y
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]
    assert len(module._PLANS) == 1
    x2 = torch.randn(1, 128, generator=gen)  # the same signature: the plan serves it, with this call's x
    torch.testing.assert_close(module.linear(x2, w, torch.zeros(1, 64)), x2 @ w.t(), rtol=1e-4, atol=1e-4)
