"""Softmax: the shared row-wise suite, plus what only softmax has (the `stats` gene, its numerics)."""

import pytest

import operators
from tests.operators._rowwise_cases import TEST_TARGET, base_genome, base_source, relative_error, run_case
from tests.operators._rowwise_suite import *  # noqa: F403 (the shared tests run for this operator)

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


@pytest.fixture
def op():
    return operators.get("softmax")


def test_stats_gene_changes_source(op):
    p = op.problem((33, 300), "fp16")
    row = base_source(op, p, mode="looped", BLOCK=128, stats="row")
    lane = base_source(op, p, mode="looped", BLOCK=128, stats="lane")
    assert 'm_row = tl.full([ROWS], float("-inf"), tl.float32)' in row and "tl.full([ROWS, BLOCK]" not in row
    assert "m = tl.full([ROWS, BLOCK], -3.0e38, tl.float32)" in lane and "m_new = tl.maximum(m, x)" in lane
    single = base_source(op, p, stats="lane")
    assert single == base_source(op, p, stats="row")  # no loop, no running stats


@pytest.mark.parametrize("stats", ["row", "lane"])
def test_online_softmax_survives_large_and_shifted_rows(op, stats):
    """Rows whose maximum sits in a late block (the running max must rescale the sum) and large values
    (exp would overflow without the max subtracted)."""
    import torch

    from evo.evaluate.modules import load_source

    p = op.problem((6, 200), "fp32")
    genome = base_genome(op, p, mode="looped", BLOCK=32, ROWS=2, num_warps=1, stats=stats)
    module = load_source(op.render(genome, p, TEST_TARGET))
    x = torch.randn(6, 200)
    x[0, 190:] += 50.0  # maximum in the ragged last block
    x[1] = torch.linspace(-80.0, 80.0, 200)  # grows across every block
    x[2] *= 30.0
    x[3, :] = 1000.0  # uniform and huge
    out = module.softmax(x)
    assert relative_error(out, op.reference(x)) <= op.tolerance(p)
    assert torch.allclose(out.sum(-1), torch.ones(6), atol=1e-5)


def test_fp16_tolerance_grows_with_width(op):
    narrow, wide = op.problem((8, 1000), "fp16"), op.problem((8, 100000), "fp16")
    assert op.tolerance(wide) > op.tolerance(narrow) and op.tolerance(op.problem((8, 100000), "bf16")) == 1.6e-2


def test_single_row_one_element(op):
    p = op.problem((1, 1), "fp32")
    g = op.family.seeds(p, TEST_TARGET)[0]
    assert run_case(op, p, g) <= op.tolerance(p)
