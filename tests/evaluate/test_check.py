"""The correctness check: fresh inputs, NaN-poisoned outputs, relative Frobenius error, worst verdict wins."""

import pytest
import torch

from evo.evaluate.check import judge, poisoned_like, relative_error, run_check, takes_out
from tests.fixtures.faulty_operator import FaultyOperator

OP = FaultyOperator()
PROBLEM = OP.problem((257,), "fp32")


def good(x, y, out=None):
    out = torch.empty_like(x) if out is None else out
    torch.add(y, x, alpha=2, out=out)
    return out


def half_written(x, y, out=None):  # leaves every odd element as it found it
    out = torch.empty_like(x) if out is None else out
    out[::2] = (2 * x + y)[::2]
    return out


def stale_then_half(x, y, out=None):
    """Allocates a fresh output holding the right answer (like a stale buffer from an earlier run), then
    writes only half of whatever buffer it is given: only the poisoned run exposes it."""
    if out is None:
        return 2 * x + y
    out[::2] = (2 * x + y)[::2]
    return out


def off_by_a_bit(x, y, out=None):
    return good(x, y, out).add_(1e-3)


def no_out(x, y):
    return 2 * x + y


def test_relative_error_is_frobenius():
    ref = torch.tensor([3.0, 4.0])
    assert relative_error(torch.tensor([3.0, 4.0]), ref) == 0.0
    assert relative_error(torch.tensor([3.0, 5.0]), ref) == pytest.approx(1 / 5)
    assert relative_error(torch.tensor([0.5]), torch.tensor([0.0])) == pytest.approx(0.5)  # absolute at zero


def test_judge_statuses():
    ref = torch.ones(8)
    assert judge(torch.ones(8), ref, 1e-6)[0] == "ok"
    assert judge(torch.ones(8) * 1.1, ref, 1e-3)[0] == "wrong"
    bad = torch.ones(8)
    bad[3] = float("inf")
    assert judge(bad, ref, 1e-3)[0] == "nan"
    assert judge(torch.ones(4), ref, 1e-3)[0] == "wrong"  # shape mismatch
    assert judge((torch.ones(8), torch.ones(8)), (ref, ref * 2), 1e-3)[0] == "wrong"  # second output is off


def test_poisoned_like():
    assert torch.isnan(poisoned_like(torch.zeros(3))).all()
    assert (poisoned_like(torch.zeros(3, dtype=torch.int32)) == torch.iinfo(torch.int32).max).all()
    pair = poisoned_like((torch.zeros(2), torch.zeros(2)))
    assert isinstance(pair, tuple) and all(torch.isnan(t).all() for t in pair)


def test_takes_out():
    assert takes_out(good) and not takes_out(no_out)


@pytest.mark.parametrize("launcher,status", [(good, "ok"), (no_out, "ok"), (half_written, "nan"),
                                             (stale_then_half, "nan"), (off_by_a_bit, "wrong")])
def test_run_check(launcher, status):
    result = run_check(launcher, OP, PROBLEM, seed=3, device="cpu")
    assert result.status == status, result.reason
    if status == "ok":
        assert result.max_rel_error is not None and result.max_rel_error < OP.tolerance(PROBLEM)
        assert len(result.inputs) == 2 and result.takes_out == takes_out(launcher)
    if status == "wrong":
        assert result.max_rel_error > OP.tolerance(PROBLEM)


def test_fresh_inputs_per_seed():
    a = run_check(good, OP, PROBLEM, seed=1, device="cpu").inputs[0]
    b = run_check(good, OP, PROBLEM, seed=2, device="cpu").inputs[0]
    assert not torch.equal(a, b) and a.abs().sum() > 0  # never zeros


def scribbles_on_its_input(x, y, out=None):
    """Right answer, but it zeroes its own y: a reference taken after it would agree with any output."""
    out = torch.empty_like(x) if out is None else out
    torch.add(y, x, alpha=2, out=out)
    y.zero_()
    return out


def test_a_kernel_that_modifies_its_inputs_is_wrong():
    result = run_check(scribbles_on_its_input, OP, PROBLEM, seed=3, device="cpu")
    assert result.status == "wrong" and "modified its input 1" in result.reason
