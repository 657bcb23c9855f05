"""Gluon attention kernels on a real GPU, as a model calls them: q a transposed [B, L, H, D] view and k, v slices of
a static KV cache, read in place through 4-d TMA descriptors (the plan's strided path, which the search's contiguous
inputs never take), and the same inputs made contiguous (the 2-d path). Every Gluon seed of each problem must match
the fp32 reference on both, and the strided plan must not have copied.

    python -m pytest tests/gpu/test_attention_gluon_gpu.py -m gpu -s
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.gpu

CASES = (  # (operator, batch, heads, kv_heads, q_len, kv_len, head_dim, dtype)
    ("attention+causal", 1, 32, 8, 640, 4736, 128, "bf16"),  # a zoo layer's prefill over a cache
    ("attention", 2, 16, 4, 300, 777, 128, "fp16"),
    ("attention+causal", 2, 8, 8, 513, 513, 64, "bf16"),
)


def _strided(op: Any, problem: Any, seed: int = 0) -> tuple[Any, Any, Any]:
    import torch

    d = problem.dims
    dtype = torch.bfloat16 if problem.dtype == "bf16" else torch.float16
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(d["batch"], d["q_len"], d["heads"], d["head_dim"], generator=gen, device="cuda", dtype=dtype)
    cache = torch.randn(2, d["batch"], d["kv_heads"], d["kv_len"] + 96, d["head_dim"], generator=gen, device="cuda",
                        dtype=dtype)
    return q.transpose(1, 2), cache[0, :, :, :d["kv_len"]], cache[1, :, :, :d["kv_len"]]


def test_gluon_seeds_read_a_models_strided_tensors_in_place_and_match():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (the Gluon rendering is Hopper's)")
    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    target, failures, checked = Target.from_torch(), [], 0
    for name, *sizes, dtype in CASES:
        op = operators.get(name)
        problem = op.problem(tuple(sizes), dtype)
        q, k, v = _strided(op, problem)
        assert not q.is_contiguous() and not k.is_contiguous()
        ref = op.reference(q.contiguous(), k.contiguous(), v.contiguous())
        for genome in [g for g in op.family.seeds(problem, target) if g["backend"] == "gluon"]:
            module = load_source(op.render(genome, problem, target))
            assert module.attention_plan(q, k, v, None, module.CONFIG).strided, \
                "the plan copied tensors TMA can read in place"
            for how, args in (("strided", (q, k, v)), ("contiguous", (q.contiguous(), k.contiguous(),
                                                                         v.contiguous()))):
                out = module.attention(*args)
                torch.cuda.synchronize()
                err = float((out.float() - ref).norm() / ref.norm())
                checked += 1
                if not err <= op.tolerance(problem):
                    failures.append(f"{problem.key} {how} {genome}: relative error {err:.3g}")
    assert checked >= 12
    assert not failures, "\n".join(failures)
