"""No kernel reads past its operands: every operator's first seeds and a seeded random genome on a small unaligned
problem, run in the interpreter with each input inside guard memory (tests/fixtures/guarded.py), give finite outputs
that match the reference. A masked load whose mask misses a case, or an index (a scale group, a row past M) that
runs off a tensor, reads NaN here, where ordinary memory past a tensor usually holds harmless values (fp8_gemm's
block scales once read a group past K in a split's last chunk: only a two-worker run of the suite showed it; its
own test, in tests/operators/fp8_gemm, takes that genome)."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.evaluate.check import check_launcher
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from tests.fixtures.guarded import guarded

# operator -> a small problem whose sizes are multiples of no tile (fp16: the interpreter's bf16 is broken)
SHAPES = {
    "gemm": (33, 72, 100), "gemm+bias+gelu": (33, 72, 100), "gemm+swiglu": (33, 72, 100),
    "gemm+geglu": (33, 72, 100), "gemm+residual": (33, 72, 100),
    "softmax": (7, 300), "rmsnorm": (5, 300), "rmsnorm+residual": (5, 77),
    "attention": (1, 2, 1, 17, 33, 32), "attention+causal+softcap50": (1, 2, 1, 17, 33, 32),
    "linear": (3, 72, 100), "linear+rmsnorm+swiglu": (3, 72, 100), "linear+geglu": (3, 72, 100),
    "rope_cache": (5, 2, 1, 32, 64), "moe_gate_up": (5, 4, 2, 48, 64), "moe_down": (5, 4, 2, 64, 48),
    "cache_attention": (1, 2, 1, 1, 65, 32), "fp8_gemm": (20, 48, 96), "fp8_gemm+channel": (33, 72, 100),
    "fp8_gemm+block": (17, 130, 384),
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_no_kernel_reads_past_its_operands(name):
    op = operators.get(name)
    p = op.problem(SHAPES[name], "fp16")
    genomes = op.family.seeds(p, INTERPRETED_HOPPER)[:2] + [
        op.family.random(np.random.default_rng(len(name)), p, INTERPRETED_HOPPER)]
    for g in genomes:
        fn = getattr(load_source(op.render(g, p, INTERPRETED_HOPPER)), op.entry)
        inputs = op.make_inputs(p, 0, device="cpu")
        ref = op.reference(*inputs)  # from the inputs untouched, as the evaluator's check takes it
        # the evaluator's own check (outputs, what it writes into its inputs, poisoned out=) on guarded inputs
        result = check_launcher(fn, tuple(guarded(x) for x in inputs), ref, op.tolerance(p), "cpu",
                                written=getattr(op, "written", None))
        assert result.status == "ok", f"{p.key} {g}: {result.reason}"
