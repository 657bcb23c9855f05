"""Split-K over long K and few output tiles (issue 44): tens of programs per tile, their partials summed in the
kernel in two levels (operators/gemm/tile_store.py: _reduce_split), checked in the Triton interpreter against the
reference, bitwise repeatable, with every arrival counter back at zero after each launch."""

from __future__ import annotations

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from operators.gemm.plan import split_workspace

OP = operators.get("gemm")
FAMILY = OP.family
SHAPE = (64, 64, 10000)  # 4 tiles of 32 x 32, 157 K steps of 64 (the last 16 wide): one or two per split at 128


def _module(split: int, dtype: str, memory: str = "pointer"):
    problem = OP.problem(SHAPE, dtype)
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, split_k=split, memory=memory))
    assert FAMILY.violations(genome, problem, HOPPER) == []
    return problem, load_source(OP.render(genome, problem, HOPPER))


@pytest.mark.parametrize(("split", "dtype", "memory"), [(16, "fp32", "pointer"), (24, "fp16", "pointer"),
                                                        (64, "fp32", "descriptor"), (128, "fp16", "host_descriptor")])
def test_long_k_split_matches_the_reference_repeatably_and_resets_its_counters(split, dtype, memory):
    problem, module = _module(split, dtype, memory)
    a, b = OP.make_inputs(problem, 5, device="cpu")
    first = module.matmul(a, b)
    (run,) = module._PLANS.values()
    partials, counters = run.workspace
    slots, counted = split_workspace(split)
    assert counters.numel() == 4 * counted and partials.numel() == 4 * slots * 32 * 32
    assert not counters.any()  # every counter reset by its last program: a replay needs no zeroing
    ref = OP.reference(a, b)
    assert float((first.float() - ref).norm() / ref.norm()) <= OP.tolerance(problem)
    partials.fill_(float("nan"))  # a second launch must not read the first one's partials
    second = module.matmul(a, b)
    assert torch.equal(first, second)  # fixed summation order: bitwise repeatable
    assert not counters.any()


def test_two_levels_beyond_sixteen_splits():
    assert split_workspace(16) == (16, 1)
    assert split_workspace(24) == (27, 4)  # three group sums, a counter per group and one for the tile
    assert split_workspace(128) == (144, 17)


def test_a_lost_partial_is_caught():
    """The reference check above can fail: a kernel whose group summers skip their group's last partial is wrong."""
    problem, module = _module(24, "fp32")
    source = OP.render(FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=64, split_k=24)), problem, HOPPER)
    broken = source.replace("_sum_slots(slots, in_group,", "_sum_slots(slots, in_group - 1,")
    assert broken != source
    a, b = OP.make_inputs(problem, 5, device="cpu")
    out = load_source(broken).matmul(a, b)
    ref = OP.reference(a, b)
    assert float((out.float() - ref).norm() / ref.norm()) > OP.tolerance(problem)
