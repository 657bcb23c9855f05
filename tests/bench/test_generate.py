"""`python -m evo.bench.generate` on the CPU: a tiny config's eager ways (the zoo's roles as stand-ins computing each
operator's reference, or the tiny zoo's real kernels in the interpreter), its files, the logits check's teeth, and
one-line refusals."""

from __future__ import annotations

import json

import pytest
import torch

from tests.zoo._hf_models import SIZES, stand_ins

pytest.importorskip("transformers")

from evo.bench.generate import main  # noqa: E402


def _config(tmp_path, **changes) -> str:
    data = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "max_position_embeddings": 64, "initializer_range": 0.1, **SIZES, **changes}
    path = tmp_path / "tiny-llama.json"
    path.write_text(json.dumps(data))
    return str(path)


def _args(tmp_path, config, *extra) -> list[str]:
    return ["zoo.py", config, "--device", "cpu", "--dtype", "fp32", "--prompt", "6", "--new-tokens", "3", "--reps",
            "1", "--out", str(tmp_path / "out"), *extra]


@pytest.fixture
def zoo_ops(monkeypatch):
    ops = stand_ins()
    monkeypatch.setattr("evo.api.load_zoo", lambda path: ops)
    return ops


def test_the_cpu_run_writes_the_eager_ways_and_checks_the_logits(tmp_path, zoo_ops, capsys):
    assert main(_args(tmp_path, _config(tmp_path))) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "out" / "generate.json").read_text())
    assert doc["model"] == "tiny-llama" and doc["gpu"] == "cpu" and doc["layers"] == doc["config_layers"] == 2
    assert doc["patch"].startswith("evo patch: LlamaForCausalLM (2 layers, fp32)")
    assert set(doc["served"]) == {"norm", "qkv", "attention", "o_proj", "gate_up", "down", "lm_head"}
    for way in ("compile", "zoo_compile"):
        assert doc["ways"][way] == {"failure": "needs CUDA (torch.compile with CUDA graphs)"}
    eager, zoo = doc["ways"]["eager"], doc["ways"]["zoo_eager"]
    assert eager["logits_rel_error"] == 0 and eager["tokens_agree"] == 4
    assert zoo["logits_rel_error"] < 1e-5 and zoo["tokens_agree"] == 4 and zoo["within_tolerance"]
    for row in (eager, zoo):
        assert row["prefill_ms"] > 0 and row["decode_tok_s"] > 0
        assert row["prefill_tok_s"] == pytest.approx(6 / row["prefill_ms"] * 1e3, rel=1e-2)
    assert all(g["ratio"] is None for g in doc["goals"].values())  # interpreter times are no timing
    assert out == (tmp_path / "out" / "generate.md").read_text()
    assert "NOT a timing" in out and out.rstrip().endswith("(goal 1.1x)")


def test_a_wrong_op_fails_the_logits_check(tmp_path, zoo_ops, capsys):
    zoo_ops["down"] = lambda a, b, residual: a @ b  # the residual dropped
    assert main(_args(tmp_path, _config(tmp_path))) == 1
    err = capsys.readouterr().err
    assert "the logits of zoo_eager are outside the tolerance 0.01" in err
    doc = json.loads((tmp_path / "out" / "generate.json").read_text())
    assert doc["ways"]["zoo_eager"]["within_tolerance"] is False


def test_layers_cuts_the_depth(tmp_path, zoo_ops):
    assert main(_args(tmp_path, _config(tmp_path), "--layers", "1")) == 0
    doc = json.loads((tmp_path / "out" / "generate.json").read_text())
    assert (doc["layers"], doc["config_layers"]) == (1, 2) and "(1 layer, fp32)" in doc["patch"]


@pytest.mark.parametrize("extra, changes, says", [
    (["--layers", "3"], {}, "--layers 3: the config has 2 layers; give 1 to 2"),
    (["--prompt", "0"], {}, "--prompt must be at least 1; got 0"),
    (["--prompt", "61"], {}, "--prompt 61 + --new-tokens 3 passes the model's 64 positions"),
    ([], {"model_type": "olmo2"}, "model_type 'olmo2': the patch serves llama, qwen2, qwen3, mistral, phi3"),
    ([], {"hidden_size": "64"}, "hidden_size: expected a positive integer"),
])
def test_bad_input_is_one_line(tmp_path, zoo_ops, capsys, extra, changes, says):
    assert main(_args(tmp_path, _config(tmp_path, **changes), *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and err.startswith("evo generate bench: ")
    assert not (tmp_path / "out").exists()


def test_a_missing_zoo_module_is_one_line(tmp_path, capsys):
    assert main(_args(tmp_path, _config(tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert "zoo.py: cannot read it" in err and "\n" not in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_without_a_gpu_the_default_device_is_refused(tmp_path, zoo_ops, capsys):
    args = _args(tmp_path, _config(tmp_path))
    args.remove("--device"), args.remove("cpu")
    assert main(args) == 2
    assert "none is visible here (--device cpu runs the eager ways only)" in capsys.readouterr().err


@pytest.mark.slow
def test_the_tiny_zoo_s_kernels_generate_within_tolerance(tmp_path, tiny_zoo):
    args = _args(tmp_path, _config(tmp_path))
    args[0], args[args.index("fp32")] = str(tiny_zoo), "fp16"
    assert main(args) == 0
    doc = json.loads((tmp_path / "out" / "generate.json").read_text())
    assert doc["ways"]["zoo_eager"]["within_tolerance"] and doc["ways"]["zoo_eager"]["tokens_agree"] == 4
    assert "attention" in doc["served"] and len(doc["served"]) >= 5


def test_the_tolerance_admits_torch_compile_s_own_error_and_no_more():
    from evo.bench.generate import SLACK, allowed

    assert allowed(0.05, None) == 0.05 and allowed(0.05, {"failure": "x"}) == 0.05
    assert allowed(0.05, {"logits_rel_error": 0.01}) == 0.05  # compile close to eager: the dtype's tolerance
    assert allowed(0.05, {"logits_rel_error": 0.064}) == SLACK * 0.064  # deep bf16 model: compile's own, with slack
    row, ref = {"_tokens": [1, 2], "_logits": [torch.ones(4) * 1.07, torch.ones(4)]}, \
        {"_tokens": [1, 2], "_logits": [torch.ones(4), torch.ones(4)]}
    from evo.bench.generate import _check

    _check(row, ref, allowed(0.05, {"logits_rel_error": 0.064}))
    assert row["within_tolerance"] and row["tolerance"] == 0.08
    _check(row, ref, allowed(0.05, {"logits_rel_error": 0.04}))
    assert not row["within_tolerance"]
