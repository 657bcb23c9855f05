"""evo's ops under CUDA-graph trees (torch.compile mode="reduce-overhead", as transformers' generate() with a static
cache runs them): a plan made on a signature's first call keeps its workspace outside the graph's pool
(evo.launch.first_call), so the trees' check ("tensor(s) in the cudagraph pool not tracked as outputs") passes.
The linear plans (split-K and not, operators/linear/kernel.py) keep no tensor of the call that made them.
Three tests: an op whose first call keeps memory (as a plan's split-K workspace does), compiled with reduce-overhead,
runs and matches, and fails as it did before when the first call is made in place (the control); a 2-layer Llama of
hidden 256 patched with linear kernels that keep a split-K workspace generates under a static cache and
reduce-overhead with the logits of its eager run; and `python -m evo.bench.generate`'s four ways complete on it.
Run on the GPU machine:
    python3 -m pytest tests/gpu/test_generate_compile_gpu.py -q -x
(a minute or two: torch.compile of a small model)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

import operators
from evo.api import as_torch_op
from evo.evaluate.modules import load_source
from evo.problem import HOPPER

pytestmark = pytest.mark.gpu

pytest.importorskip("transformers")
if not torch.cuda.is_available():
    pytest.skip("needs CUDA (CUDA-graph trees)", allow_module_level=True)

SIZES = dict(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
             num_hidden_layers=2)


def _fresh() -> None:
    import torch._dynamo
    from torch._inductor import cudagraph_trees

    torch._dynamo.reset()
    cudagraph_trees.reset_cudagraph_trees()


def _keeping_op(tag: str):
    """An rmsnorm op whose entry keeps a 4 MiB buffer per argument signature, made on its first call (a plan's
    workspace), and returns the buffers it keeps."""
    kept: dict[tuple, torch.Tensor] = {}

    def rmsnorm(x, weight, out=None, eps=1e-6):
        key = (x.shape, x.dtype)
        if key not in kept:
            kept[key] = torch.zeros(1 << 20, dtype=torch.float32, device=x.device)
        y = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)
        kept[key].add_(1.0)  # the kernel uses its workspace
        return y if out is None else out.copy_(y)

    return as_torch_op(rmsnorm, operators.get("rmsnorm"), tag=tag), kept


def _compiled(op):
    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def step(x, w):
        return op(x * 2.0, w, 1e-6) + 1.0

    return step


def test_a_first_call_that_keeps_memory_runs_under_cuda_graph_trees(monkeypatch):
    _fresh()
    op, kept = _keeping_op("keepsmemory1")
    x = torch.randn(4, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, device="cuda", dtype=torch.bfloat16)
    step = _compiled(op)
    ref = torch.nn.functional.rms_norm((x * 2.0).float(), (256,), w.float(), 1e-6).to(x.dtype) + 1.0
    for _ in range(5):  # warm-up, recording, replays
        y = step(x, w).clone()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, ref)
    assert len(kept) == 1 and float(next(iter(kept.values()))[0]) >= 2  # it ran, then its graph replayed it

    # the control: the first call made in place, inside the warm-up's pool, fails as generate() did
    from evo.launch import first_call

    _fresh()
    monkeypatch.setattr(first_call, "outside_graph_pools", lambda fn, device: fn())
    op, _ = _keeping_op("keepsmemory2")
    step = _compiled(op)
    with pytest.raises(Exception, match="not tracked as outputs"):
        for _ in range(5):
            step(x, w)
    torch.cuda.synchronize()
    _fresh()


def _linear_op(name: str, sizes: tuple[int, ...], split_k: bool = True):
    """A rendered seed kernel of linear operator `name` with a split-K workspace (SPLIT_K > 1), or without one (its
    plan once kept the first call's x in the workspace's place)."""
    op = operators.get(name)
    problem = op.problem(sizes, "bf16")
    split = [g for g in op.family.seeds(problem, HOPPER) if (g.get("SPLIT_K") > 1) == split_k]
    assert split, f"no seed of {name} at {sizes} has SPLIT_K {'> 1' if split_k else '1'}"
    genome = op.family.repair(split[0], problem, HOPPER, np.random.default_rng(0))
    source = op.render(genome, problem, HOPPER)
    module = load_source(source)
    return as_torch_op(getattr(module, op.entry), op, tag=hashlib.sha256(source.encode()).hexdigest()[:16]), module


def _zoo() -> tuple[dict, list]:
    h, inter = SIZES["hidden_size"], SIZES["intermediate_size"]
    qkv = h + 2 * SIZES["num_key_value_heads"] * (h // SIZES["num_attention_heads"])
    made = {"linear_qkv": _linear_op("linear+rmsnorm", (1, qkv, h)),
            "linear_o_proj": _linear_op("linear+residual", (1, h, h), split_k=False),
            "linear_gate_up": _linear_op("linear+rmsnorm+swiglu", (1, inter, h)),
            "linear_down": _linear_op("linear+residual", (1, h, inter))}
    return {role: op for role, (op, _) in made.items()}, [m for _, m in made.values()]


def _model():
    from tests.zoo._hf_models import tiny_model

    return tiny_model("llama", torch.bfloat16, **SIZES).cuda()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def test_a_patched_llama_generates_with_a_static_cache_under_reduce_overhead():
    from evo.bench.generate import TOLERANCE, _generator
    from evo.zoo.hf_patch import patch_model, unpatch_model

    _fresh()
    model = _model()
    ids = torch.randint(3, SIZES["vocab_size"], (1, 32), generator=torch.Generator().manual_seed(0)).cuda()
    new = 8
    extra = dict(output_logits=True, return_dict_in_generate=True)
    plain = _generator(model, ids, "eager", new)(new + 1, **extra)
    ops, modules = _zoo()
    report = patch_model(model, ops, quiet=True)
    assert set(report.served) == set(ops), report.line()
    compiled = _generator(model, ids, "zoo_compile", new)
    for _ in range(3):  # compile, CUDA-graph warm-up and recording, replays: the failure came at the recording
        out = compiled(new + 1, **extra)
    torch.cuda.synchronize()
    assert any(run.workspace is not None for m in modules for run in m._PLANS.values())  # a split-K workspace
    got, ref = torch.stack(out.logits), torch.stack(plain.logits)
    assert got.shape == ref.shape
    agree = int((out.sequences == plain.sequences).all(dim=0).long().cumprod(0).sum()) - ids.shape[1]
    assert agree >= 1  # greedy tokens as eager's while they agree, the logits compared over those steps
    assert _rel(got[:agree], ref[:agree]) < TOLERANCE["bf16"]
    unpatch_model(model)
    _fresh()


def test_the_generate_bench_runs_its_four_ways(tmp_path, monkeypatch):
    from evo.bench.generate import main

    _fresh()
    ops, _ = _zoo()
    monkeypatch.setattr("evo.api.load_zoo", lambda path: ops)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "max_position_embeddings": 256, "initializer_range": 0.1, "rms_norm_eps": 1e-6,
              "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, **SIZES}
    path = tmp_path / "small-llama.json"
    path.write_text(json.dumps(config))
    zoo = tmp_path / "zoo.py"
    zoo.write_text("")
    rc = main([str(zoo), str(path), "--prompt", "64", "--new-tokens", "8", "--reps", "1", "--out",
               str(tmp_path / "out")])
    doc = json.loads((tmp_path / "out" / "generate.json").read_text())
    failures = {w: r["failure"] for w, r in doc["ways"].items() if r.get("failure")}
    assert not failures, failures
    assert rc == 0 and doc["ways"]["zoo_compile"]["within_tolerance"] is True
    _fresh()
