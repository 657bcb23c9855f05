"""The Triton kernel's switches no genome sets yet (operators/attention/kernel.py: SOFTCAP, logit soft-capping as in
Gemma 2, and WINDOW, a sliding window as in Mistral), run in the interpreter through the kernel's own plan with every
loop structure they touch (the split and the all-masked key loops, key splits combined either way, packed GQA, TMA,
a persistent grid), against the formula in fp32."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import operators
from evo.problem import HOPPER
from operators.attention.kernel import attention_plan
from operators.attention.module import attention_config

SMALL_GPU = dataclasses.replace(HOPPER, num_sms=3)
CASES = [  # (causal, genes over the family's base, SOFTCAP, WINDOW)
    (True, {}, 0.0, 20),
    (True, {}, 30.0, 33),
    (True, {"mask_loop": "masked", "q_order": "reverse"}, 5.0, 17),
    (True, {"pack_gqa": True, "kv_split": 4}, 0.0, 24),
    (True, {"kv_split": 2, "reduce": "last_program", "kv_load": "tma"}, 8.0, 40),
    (True, {"persistent": 1, "grid": "heads_first"}, 0.0, 1),
    (False, {}, 1.0, 0),  # caps of the size of the logits: the capping shows
    (False, {"pack_gqa": True, "kv_split": 2, "reduce": "last_program"}, 1.5, 0),
]


def _reference(q, k, v, causal, softcap, window):
    q, k, v = q.float(), k.float(), v.float()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    n_q, n_k = q.shape[2], k.shape[2]
    pos = torch.arange(n_q)[:, None] + (n_k - n_q)  # each query's key position (bottom-right)
    keys = torch.arange(n_k)[None, :]
    seen = torch.ones(n_q, n_k, dtype=torch.bool)
    if causal:
        seen &= keys <= pos
    if window:
        seen &= keys > pos - window
    return torch.softmax(s.masked_fill(~seen, float("-inf")), dim=-1) @ v


@pytest.mark.parametrize("causal, genes, softcap, window", CASES)
def test_soft_capping_and_a_sliding_window(causal, genes, softcap, window):
    op = operators.get("attention+causal" if causal else "attention")
    problem = op.problem((2, 4, 2, 37, 70, 32), "fp16")
    genome = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=16, num_warps=2, num_stages=2, **genes))
    assert op.family.violations(genome, problem, SMALL_GPU) == []
    config = {**attention_config(genome.as_dict(), causal, problem, SMALL_GPU), "SOFTCAP": softcap, "WINDOW": window}
    q, k, v = op.make_inputs(problem, seed=3, device="cpu")
    run = attention_plan(q, k, v, None, config)
    ref = _reference(q, k, v, causal, softcap, window)
    for _ in range(2):  # the plan (and its counters) reused
        out = run(q, k, v, None, None)
        assert ((out.float() - ref).norm() / ref.norm()).item() < op.tolerance(problem)
    # the switches matter: without them the same inputs give another result
    plain = _reference(q, k, v, causal, 0.0, 0)
    assert ((plain - ref).norm() / ref.norm()).item() > 100 * op.tolerance(problem)
