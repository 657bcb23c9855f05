"""A role whose zoo module runs its baseline at a token count (USES) leaves that count to the layer's own torch code
(evo.zoo.uses): evo.zoo.patch's DecoderLayer and evo.zoo.hf_patch's Hugging Face layers do not call the op there
(counted), the output still matches, other token counts and roles still call it, and a module without USES runs
evo everywhere as before."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch

from evo.zoo.layer import DecoderLayer
from evo.zoo.patch import patch, torch_tokens, unpatch
from evo.zoo.uses import baseline_tokens, split_tokens, uses
from tests.zoo._hf_models import gemm_stand_in, named, prompt, rel, tiny_model
from tests.zoo._layer_cases import TINY, hidden_states

CONTEXT = 8


def with_uses(fn: Callable[..., Any], operator: str, table: dict[tuple[int, ...], str | None], dtype: str,
              monkeypatch: Any, calls: list[str], role: str) -> Callable[..., Any]:
    """`fn` as a zoo op whose module measured the shapes of `table`, each with its USES choice ("evo", "baseline";
    None: a module exported before USES, which names none); each call appends `role` to `calls`."""
    module = types.ModuleType(f"evo_test_uses_{len(sys.modules)}_{id(fn)}")
    module._EVO_VARIANTS = {f"{'x'.join(map(str, s))}:{dtype}": {"sizes": s, "dtype": dtype} for s in table}
    if any(u is not None for u in table.values()):
        module.USES = {f"{'x'.join(map(str, s))}:{dtype}": (u, "test") for s, u in table.items()}
    monkeypatch.setitem(sys.modules, module.__name__, module)

    def entry(*args: Any) -> Any:
        calls.append(role)
        return fn(*args)

    entry.__module__ = module.__name__
    op = named(entry, operator)
    op.entry = entry  # type: ignore[attr-defined]
    return op


def test_uses_reads_the_module_and_a_module_without_uses_runs_evo_everywhere(monkeypatch):
    calls: list[str] = []
    op = with_uses(gemm_stand_in("linear+residual"), "linear+residual",
                   {(1, 64, 128): "evo", (4, 64, 128): "baseline", (4, 64, 64): "baseline"}, "fp32", monkeypatch,
                   calls, "linear_down")
    assert sorted(uses(op)) == [((1, 64, 128), "fp32", "evo"), ((4, 64, 64), "fp32", "baseline"),
                                ((4, 64, 128), "fp32", "baseline")]
    assert baseline_tokens(op, "linear_down", (64, 128), "fp32") == {4}
    assert baseline_tokens(op, "linear_down", (64, 128), "bf16") == frozenset()
    old = with_uses(gemm_stand_in("linear+residual"), "linear+residual", {(4, 64, 128): None}, "fp32", monkeypatch,
                    calls, "linear_down")
    assert uses(old) is None and baseline_tokens(old, "linear_down", (64, 128), "fp32") == frozenset()
    assert split_tokens("attention", (1, 4, 2, 16, 4112, 128)) == (16, (4, 2, 128))
    # every role that serves attention splits as attention (base_role: one table for the patch and USES)
    for role in ("cache_attention", "attention_local"):
        assert split_tokens(role, (1, 4, 2, 1, 4097, 128)) == (1, (4, 2, 128))
    assert split_tokens("rope", (16, 28, 4, 128, 6128)) == (16, (28, 4, 128))
    # the MoE roles (T, E, TOPK, N, K) and the Gemma-2 layer's norms (rows, cols)
    assert split_tokens("moe_gate_up", (16, 8, 2, 14336, 4096)) == (16, (8, 2, 14336, 4096))
    assert split_tokens("moe_down", (16, 8, 2)) is None
    assert split_tokens("post_norm", (16, 3584)) == split_tokens("add_norm", (16, 3584)) == (16, (3584,))


def test_a_layer_runs_its_torch_code_where_the_zoo_runs_its_baseline(monkeypatch):
    """linear_gate_up's module: evo at T=1, baseline at T=4; linear_o_proj and linear_down share one module
    (linear+residual) whose baseline is at down's shape at T=4 only: o_proj still runs the op there."""
    ref_layer = DecoderLayer(TINY, dtype=torch.float32, context=CONTEXT, max_tokens=16)
    layer = DecoderLayer(TINY, dtype=torch.float32, context=CONTEXT, max_tokens=16)
    h, inter = TINY.hidden_size, TINY.intermediate_size
    calls: list[str] = []
    residual = {(1, h, h): "evo", (4, h, h): "evo", (1, h, inter): "evo", (4, h, inter): "baseline"}
    ops = {"linear_gate_up": with_uses(gemm_stand_in("linear+rmsnorm+swiglu"), "linear+rmsnorm+swiglu",
                                       {(1, inter, h): "evo", (4, inter, h): "baseline"}, "fp32", monkeypatch, calls,
                                       "linear_gate_up"),
           "linear_o_proj": with_uses(gemm_stand_in("linear+residual"), "linear+residual", residual, "fp32",
                                      monkeypatch, calls, "linear_o_proj"),
           "linear_down": with_uses(gemm_stand_in("linear+residual"), "linear+residual", residual, "fp32",
                                    monkeypatch, calls, "linear_down")}
    patch(layer, ops)
    assert torch_tokens(layer) == {"linear_gate_up": (4,), "linear_down": (4,)}
    for tokens, called in ((1, ["linear_o_proj", "linear_gate_up", "linear_down"]), (4, ["linear_o_proj"])):
        calls.clear()
        x = hidden_states(TINY, tokens)
        y, ref = layer(x), ref_layer(x)
        assert calls == called, tokens
        assert rel(y, ref) < 1e-6
    x = hidden_states(TINY, 4)
    assert torch.equal(layer.ffn(x), ref_layer.ffn(x))  # at T=4 the second half is the unpatched layer's own code
    unpatch(layer)
    assert torch_tokens(layer) == {}


def test_a_moe_and_a_gemma2_layer_run_their_torch_code_where_the_zoo_runs_its_baseline(monkeypatch):
    """moe_down's module: evo at T=1, baseline at T=4 (the layer's torch experts run there: a baseline inside the op
    would be transformers' loop, whose host sync no CUDA graph captures); post_norm's: baseline at T=4."""
    import operators
    from evo.zoo.layer_gemma import Gemma2DecoderLayer
    from evo.zoo.layer_moe import MoEDecoderLayer
    from tests.zoo._layer_cases import TINY_GEMMA2 as GEMMA
    from tests.zoo._layer_cases import TINY_MOE

    calls: list[str] = []
    moe = MoEDecoderLayer(TINY_MOE, dtype=torch.float32)
    e, k, h, inter = TINY_MOE.num_experts, TINY_MOE.experts_per_token, TINY_MOE.hidden_size, TINY_MOE.intermediate_size
    down = operators.get("moe_down")
    patch(moe, {"moe_down": with_uses(lambda *a: down.reference(*a), "moe_down",
                                      {(1, e, k, h, inter): "evo", (4, e, k, h, inter): "baseline"}, "fp32",
                                      monkeypatch, calls, "moe_down")})
    gemma = Gemma2DecoderLayer(GEMMA, dtype=torch.float32)
    norm = operators.get("rmsnorm")
    patch(gemma, {"post_norm": with_uses(lambda x, w, eps: norm.reference(x, w), "rmsnorm",
                                         {(1, GEMMA.hidden_size): "evo", (4, GEMMA.hidden_size): "baseline"}, "fp32",
                                         monkeypatch, calls, "post_norm")})
    assert torch_tokens(moe) == {"moe_down": (4,)} and torch_tokens(gemma) == {"post_norm": (4,)}
    for layer, spec in ((moe, TINY_MOE), (gemma, GEMMA)):
        for tokens, runs in ((1, True), (4, False)):
            calls.clear()
            layer(hidden_states(spec, tokens))
            assert bool(calls) == runs, (spec.name, tokens)


def test_a_hugging_face_model_runs_transformers_code_where_the_zoo_runs_its_baseline(monkeypatch):
    from evo.api import patch_model

    model = tiny_model("llama")
    ids = prompt()
    with torch.no_grad():
        ref = model(ids).logits
    tokens = model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static")
    calls: list[str] = []
    ops = {"linear_gate_up": with_uses(gemm_stand_in("linear+rmsnorm+swiglu"), "linear+rmsnorm+swiglu",
                                       {(1, 128, 64): "baseline", (4, 128, 64): "evo"}, "fp32", monkeypatch, calls,
                                       "linear_gate_up"),
           "linear_down": with_uses(gemm_stand_in("linear+residual"), "linear+residual",
                                    {(1, 64, 128): "evo", (4, 64, 128): "baseline"}, "fp32", monkeypatch, calls,
                                    "linear_down")}
    report = patch_model(model, ops, quiet=True)
    assert report.served == {"linear_gate_up": ("linear+rmsnorm+swiglu", (4,)),
                             "linear_down": ("linear+residual", (1,))}
    assert report.torch_at == {"linear_gate_up": (1,), "linear_down": (4,)}
    assert "torch's code where the zoo runs its baseline: linear_gate_up at T=1; linear_down at T=4" in report.line()
    with torch.no_grad():
        assert rel(model(ids).logits, ref) < 1e-5  # the prompt: 4 rows
    assert calls == ["linear_gate_up"] * 2  # both layers' gate_up; down at T=4 on torch
    calls.clear()
    assert torch.equal(model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static"), tokens)
    assert set(calls[2:]) == {"linear_down"}  # decode steps (T=1): down on the op, gate_up on torch
    only = with_uses(gemm_stand_in("linear+residual"), "linear+residual", {(1, 64, 128): "baseline"}, "fp32",
                     monkeypatch, calls, "linear_down")
    report = patch_model(model, {"linear_down": only}, quiet=True)
    assert report.kept["linear_down"] == "its zoo runs its baseline at every T it measured (1)"


@pytest.mark.slow
def test_the_tiny_zoo_s_baseline_at_one_t_leaves_it_to_the_layer_s_torch_code(tiny_zoo, monkeypatch):
    """The real tiny zoo (tests/fixtures/tiny_zoo.py: fp16, T = 1 and 4), its linear_gate_up module's USES set to
    baseline at T=4: the patched layer calls that op at T=1 only, and matches the plain layer at both."""
    import inspect
    import warnings

    from evo.api import load_zoo
    from tests.fixtures.tiny_zoo import CONTEXT as ZOO_CONTEXT
    from tests.zoo._hf_models import recording

    ops = load_zoo(tiny_zoo)
    table = inspect.getmodule(ops["linear_gate_up"].entry).USES
    key = f"4x{TINY.intermediate_size}x{TINY.hidden_size}:fp16"
    assert table[key][0] == "evo"  # a smoke zoo runs evo everywhere
    monkeypatch.setitem(table, key, ("baseline", "evo's best 0.9x eager (this test)"))
    roles = ("linear_qkv", "rope", "attention", "linear_o_proj", "linear_gate_up", "linear_down")
    calls: list = []
    for tokens in (1, 4):
        plain = DecoderLayer(TINY, dtype=torch.float16, init_std=0.2, context=ZOO_CONTEXT, max_tokens=4)
        layer = patch(DecoderLayer(TINY, dtype=torch.float16, init_std=0.2, context=ZOO_CONTEXT, max_tokens=4),
                      recording({r: ops[r] for r in roles}, calls))
        assert torch_tokens(layer) == {"linear_gate_up": (4,)}
        calls.clear()
        x = torch.randn(tokens, TINY.hidden_size, generator=torch.Generator().manual_seed(tokens)).half()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the cache's key lengths: the nearest measured elite serves them
            out, ref = layer(x).float(), plain(x).float()
        assert ("linear_gate_up" in [r for r, _ in calls]) == (tokens == 1), tokens
        assert "linear_down" in [r for r, _ in calls]
        assert rel(out, ref) < 5e-3, tokens


@pytest.mark.slow
def test_the_zoo_module_says_what_runs_a_measured_problem(tiny_zoo):
    from evo.evaluate.modules import load_source

    zoo = load_source(tiny_zoo.read_text())
    h, inter = TINY.hidden_size, TINY.intermediate_size
    assert zoo.runs_evo("linear_gate_up", (4, inter, h), "fp16") is True  # a smoke zoo claims no win, runs evo
    assert zoo.runs_evo("linear_gate_up", (2, inter, h), "fp16") is None  # not measured
    with pytest.raises(KeyError, match="no kernel for role 'gate'"):
        zoo.runs_evo("gate", (4, inter, h), "fp16")
