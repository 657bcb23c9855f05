"""RMSNorm: the shared row-wise suite, plus what only RMSNorm has (the weight, its gene, eps)."""

import pytest

import operators
from tests.operators._rowwise_cases import base_source, relative_error
from tests.operators._rowwise_suite import *  # noqa: F403 (the shared tests run for this operator)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture
def op():
    return operators.get("rmsnorm")


def test_evict_w_gene_changes_source(op):
    p = op.problem((33, 300), "fp16")
    for genes in ({}, {"mode": "looped", "BLOCK": 128}):
        plain, kept = base_source(op, p, **genes), base_source(op, p, evict_w="evict_last", **genes)
        assert "w = tl.load(w_ptr + cols, mask=col_mask).to(tl.float32)" in plain
        assert 'w = tl.load(w_ptr + cols, mask=col_mask, eviction_policy="evict_last")' in kept


def test_weight_is_loaded_once_per_program_when_persistent_single_pass(op):
    p = op.problem((33, 300), "fp16")
    src = base_source(op, p, persistent=2)
    assert src.index("w = tl.load(") < src.index("for rb in tl.range(")


def test_eps_and_weight_are_used(op):
    import torch

    from evo.evaluate.modules import load_source

    p = op.problem((5, 40), "fp32")
    module = load_source(base_source(op, p, num_warps=1))
    x, w = op.make_inputs(p, 0, device="cpu")
    x = x * 1e-3  # mean(x^2) ~ 1e-6: eps matters
    for eps in (1e-6, 1e-2):
        xf = x.float()
        ref = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w
        assert relative_error(module.rmsnorm(x, w, eps=eps), ref) <= 1e-5
    assert relative_error(module.rmsnorm(x, w, eps=1e-2), module.rmsnorm(x, w)) > 0.1
    assert relative_error(module.rmsnorm(x, -w), -module.rmsnorm(x, w)) <= 1e-6
    with pytest.raises(ValueError, match="weight must have shape"):
        module.rmsnorm(x, w[:-1])
