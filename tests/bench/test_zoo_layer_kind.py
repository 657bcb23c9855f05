"""The layer bench on a MoE and a Gemma-2 model, on the CPU (evo.bench.zoo_layer_kind): the layer of the model's kind
is benched four ways with the zoo's kernels (rendered for the plan, or a real smoke-searched zoo), zoo.json and zoo.md
name the four ways, the layer and what runs torch's code, a wrong kernel is caught, and what does not fit is one line.
"""

from __future__ import annotations

import json

import pytest

from evo.bench import zoo_layer
from evo.bench.zoo_layer_kind import pick_experts
from evo.bench.zoo_layer_results import TIME_KEYS, WAYS
from evo.zoo import load_model
from tests.fixtures.tiny_zoo import ROOT
from tests.zoo._rendered import plan_kernels

MODELS = ROOT / "experiments" / "models"
MOE, GEMMA = MODELS / "tiny-moe.yaml", MODELS / "tiny-gemma2.yaml"
CONTEXT = 6


@pytest.fixture
def rendered_zoo(monkeypatch):
    """evo.api.load_zoo answering with evo kernels rendered for the model's plan at T=4 (no search)."""
    def use(model, wrong: dict | None = None):
        ops = plan_kernels(load_model(model), 4, "fp16", CONTEXT)
        monkeypatch.setattr("evo.api.load_zoo", lambda path: {**ops, **(wrong or {})})
        return ops
    return use


def bench(model, out, *extra, module="zoo.py"):
    return zoo_layer.main([str(module), str(model), "--device", "cpu", "--dtype", "fp16", "--tokens", "4",
                           "--context", str(CONTEXT), "--rounds", "1", "--out", str(out), *extra])


def _check_four_ways(doc, table):
    for layer in doc["layers"]:
        assert set(TIME_KEYS) <= set(layer) and layer["eager_ms"] > 0 and layer["zoo_eager_ms"] > 0
        assert layer["failures"] == {"compile": "needs CUDA", "zoo_compile": "needs CUDA",
                                     **{f"{w}_graph": "needs CUDA" for w in WAYS}}
        assert layer["within_tolerance"] and layer["max_rel_error"] <= layer["tolerance"] == 3e-3
    header = next(line for line in table.splitlines() if line.startswith("| T |"))
    assert all(f" {w} |" in header and f" {w} graph |" in header for w in WAYS)
    assert "## The zoo's best way vs torch's best way, under CUDA graphs" in table and "WRONG" not in table


@pytest.mark.filterwarnings("ignore:no GPU here")
def test_a_moe_layer_is_benched_four_ways(rendered_zoo, tmp_path, capsys):
    ops = rendered_zoo(MOE)
    assert bench(MOE, tmp_path) == 0
    doc = json.loads((tmp_path / "zoo.json").read_text())
    table = (tmp_path / "zoo.md").read_text()
    _check_four_ways(doc, table)
    assert doc["roles"]["moe_gate_up"] == "moe_gate_up" and doc["roles"]["moe_down"] == "moe_down"
    assert set(doc["roles"]) == set(ops) and doc["roles"]["linear_router"] == "linear"
    layer = doc["layer"]
    assert layer["kind"] == "moe" and layer["experts"] == "loop" and layer["unused_roles"] == []
    assert layer["note"].startswith("tiny-moe (MoE layer, 4 experts top-2): the zoo runs norm (rmsnorm), ")
    assert "torch runs the router's softmax and top-k; the residual adds; the torch layer's experts run by loop" \
        in layer["note"]
    assert f"Layer: {layer['note']}." in table and layer["note"] in capsys.readouterr().err


@pytest.mark.filterwarnings("ignore:no GPU here")
@pytest.mark.parametrize("index", [0, 1])
def test_a_gemma2_layer_is_benched_four_ways(rendered_zoo, tmp_path, index):
    ops = rendered_zoo(GEMMA)
    assert {"attention", "attention_local", "post_norm"} <= set(ops)
    assert bench(GEMMA, tmp_path, "--layer-index", str(index)) == 0
    doc = json.loads((tmp_path / "zoo.json").read_text())
    _check_four_ways(doc, (tmp_path / "zoo.md").read_text())
    layer = doc["layer"]
    assert layer["kind"] == "gemma2" and layer["layer_index"] == index and layer["window"] == (8 if index == 0 else 0)
    assert ("attention_local" in doc["roles"]) == (index == 0)  # a global layer takes no window's variant
    # cache_attention: the decode step's (the plan's at T <= 16 with a context), which a forward pass does not run
    assert layer["unused_roles"] == (["cache_attention"] if index == 0 else ["attention_local", "cache_attention"])
    assert doc["roles"]["attention"] == "attention+causal+softcap50"
    where = "a window of 8 keys" if index == 0 else "global"
    assert layer["note"].startswith(f"tiny-gemma2 (Gemma-2 layer {index}, {where}): the zoo runs linear_qkv ")
    assert layer["attention"] == "eager" and layer["note"].endswith("the torch layer's attention runs by eager "
                                                                    "(--gemma-attention)")


@pytest.mark.filterwarnings("ignore:no GPU here", "ignore:.*flex_attention")
def test_a_gemma2_layer_with_torch_s_flex_attention(rendered_zoo, tmp_path):
    rendered_zoo(GEMMA)
    assert bench(GEMMA, tmp_path, "--gemma-attention", "flex") == 0
    doc = json.loads((tmp_path / "zoo.json").read_text())
    assert doc["layer"]["attention"] == "flex" and doc["layers"][0]["within_tolerance"]
    assert doc["layer"]["note"].endswith("the torch layer's attention runs by flex (--gemma-attention)")


@pytest.mark.filterwarnings("ignore:no GPU here")
@pytest.mark.parametrize("model, role", [(MOE, "linear_o_proj"), (GEMMA, "post_norm")])
def test_a_wrong_kernel_is_outside_the_tolerance(rendered_zoo, tmp_path, capsys, model, role):
    """o_proj without its residual; post norms that do not normalise. (With the bench's weights of std 0.02 the
    experts' and attention's share of the output is small: tests/zoo/test_layer_moe.py and test_layer_gemma.py catch
    wrong routing weights and a missing window with weights of std 0.2.)"""
    wrong = {"linear_o_proj": lambda a, w, residual: a @ w.t(), "post_norm": lambda x, w, eps: x}[role]
    rendered_zoo(model, {role: wrong})
    assert bench(model, tmp_path) == 1
    assert not json.loads((tmp_path / "zoo.json").read_text())["layers"][0]["within_tolerance"]
    assert "outside its tolerance at T=4" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.filterwarnings("ignore:no GPU here")
def test_what_does_not_fit_is_one_line(rendered_zoo, tmp_path, capsys, monkeypatch):
    rendered_zoo(GEMMA)
    assert bench(GEMMA, tmp_path, "--decode-steps", "2") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "decode loop" in err[-1] and "Gemma-2" in err[-1] and not (tmp_path / "zoo.json").exists()
    assert bench(GEMMA, tmp_path, "--layer-index", "-1") == 2
    assert "layer_index must be an integer >= 0" in capsys.readouterr().err.strip().splitlines()[-1]
    monkeypatch.setattr("evo.api.load_zoo", lambda path: {"moe_down": print, "router": print})
    assert bench(GEMMA, tmp_path) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "serves none of tiny-gemma2's layer roles (post_norm, add_norm, qkv" in err[-1]


def test_pick_experts(monkeypatch):
    import torch

    assert pick_experts("auto", "cpu") == "loop" and pick_experts("grouped_mm", "cpu") == "grouped_mm"
    assert pick_experts("auto", "cuda") == ("grouped_mm" if hasattr(torch, "_grouped_mm") else "loop")
    monkeypatch.delattr(torch, "_grouped_mm", raising=False)
    assert pick_experts("auto", "cuda") == "loop"
    with pytest.raises(ValueError, match="--experts 'dense'"):
        pick_experts("dense", "cpu")


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:no GPU here")
@pytest.mark.parametrize("model", [MOE, GEMMA], ids=["moe", "gemma2"])
def test_the_zoo_end_to_end(model, tmp_path):
    """`evo zoo MODEL --smoke --run` plans, searches (2 evaluations a problem), collects and reports; the layer bench
    runs its module at T = 1 and 4 after 6 cached tokens within the tolerance."""
    from evo.surface.cli import main

    assert main(["zoo", str(model), "--tokens", "1,4", "--dtype", "fp16", "--context", str(CONTEXT), "--smoke",
                 "--evaluations", "2", "-o", str(tmp_path / "zoo"), "--run"]) == 0
    name = load_model(model).name
    module = tmp_path / "zoo" / name / f"{name}_kernels.py"
    assert (tmp_path / "zoo" / name / "report.html").exists()
    assert bench(model, tmp_path / "bench", "--tokens", "1,4", module=module) == 0
    doc = json.loads((tmp_path / "bench" / "zoo.json").read_text())
    _check_four_ways(doc, (tmp_path / "bench" / "zoo.md").read_text())
    assert [row["tokens"] for row in doc["layers"]] == [1, 4]
    assert {"moe_gate_up", "moe_down"} <= set(doc["roles"]) if name == "tiny-moe" else \
        {"attention_local", "linear_gate_up"} <= set(doc["roles"])
