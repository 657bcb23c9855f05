"""`evo zoo`: the plan, the experiment files, the run commands; bad input in one line, exit status 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from evo.experiment.config import load_experiment
from evo.surface.cli import main

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "experiments" / "models" / "tiny.yaml")


def test_tiny_model_plan_and_files(tmp_path, capsys):
    assert main(["zoo", TINY, "--tokens", "1,16,32", "-o", str(tmp_path), "--wall-s", "5", "--context", "100"]) == 0
    out = capsys.readouterr().out
    assert "T=1" in out and "T=16" in out and "16x128x64" in out and "1x4x2x16x116x16" in out
    assert "100 tokens in the KV cache" in out
    rows = {line.split()[0]: line.split()[5:] for line in out.splitlines() if line.split()[:1] and
            line.split()[0] in ("linear_qkv", "qkv", "rope", "norm")}
    # the plan per T: linear roles (norms fused) at T <= 16, gemm roles above, rope_cache at every T
    assert rows["linear_qkv"] == ["1x128x64", "16x128x64", "-"] and rows["qkv"] == ["-", "-", "32x128x64"]
    assert rows["norm"] == ["-", "-", "32x64"]
    assert rows["rope"] == ["1x4x2x16x131", "16x4x2x16x116", "32x4x2x16x100"]  # the cache holds 100 + 32
    folder = tmp_path / "tiny"
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["attention-causal.yaml", "cache_attention.yaml", "gemm-residual.yaml", "gemm-swiglu.yaml",
                     "gemm.yaml", "linear-residual.yaml", "linear-rmsnorm-swiglu.yaml", "linear-rmsnorm.yaml",
                     "rmsnorm.yaml", "rope_cache.yaml", "softmax.yaml"]
    assert "--context 100 --collect" in out
    for name in names:
        assert f"evo run {folder / name}" in out
    swiglu = load_experiment(folder / "linear-rmsnorm-swiglu.yaml")
    assert [p.key for p in swiglu.problems] == ["linear+rmsnorm+swiglu:1x128x64:bf16",
                                                "linear+rmsnorm+swiglu:16x128x64:bf16"]
    assert swiglu.budget.wall_s == 5 and swiglu.output == str(folder)
    assert [p.key for p in load_experiment(folder / "gemm-swiglu.yaml").problems] == ["gemm+swiglu:32x128x64:bf16"]


def test_mixtral_plan_writes_the_moe_experiments(tmp_path, capsys):
    mixtral = str(ROOT / "experiments" / "models" / "mixtral-8x7b.json")
    assert main(["zoo", mixtral, "--tokens", "1,2048", "-o", str(tmp_path), "--wall-s", "5"]) == 0
    out = capsys.readouterr().out
    assert "8 experts top-2" in out and "2048x8x2x14336x4096" in out
    folder = tmp_path / "mixtral-8x7b"
    assert [p.key for p in load_experiment(folder / "moe_gate_up.yaml").problems] == [
        "moe_gate_up:1x8x2x14336x4096:bf16", "moe_gate_up:2048x8x2x14336x4096:bf16"]
    assert [p.key for p in load_experiment(folder / "moe_down.yaml").problems] == [
        "moe_down:1x8x2x4096x14336:bf16", "moe_down:2048x8x2x4096x14336:bf16"]
    assert not (folder / "gemm-swiglu.yaml").exists() and not (folder / "linear-rmsnorm-swiglu.yaml").exists()


@pytest.mark.parametrize("extra,words", [
    (["--tokens", "1,x"], "'x' is not a positive integer"),
    (["--tokens", "0"], "is not a positive integer"),
    (["--tokens", ""], "is not a positive integer"),
    (["--tokens", "4,4"], "given twice"),
    (["--tokens", ",".join(str(i) for i in range(1, 70))], "at most"),
    (["--dtype", "int8"], "--dtype"),
    (["--wall-s", "0"], "--wall-s"),
    (["--wall-s", "nan"], "--wall-s"),
    (["--context", "-1"], "--context"),
    (["--tokens", "70000000"], "2^31 - 1"),  # a tensor the kernels cannot index, refused by the experiment check
])
def test_bad_inputs_are_one_line(tmp_path, capsys, extra, words):
    assert main(["zoo", TINY, "-o", str(tmp_path), *extra]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and words in captured.err and captured.err.startswith("evo: error:")
    assert not (tmp_path / "tiny").exists() or not any((tmp_path / "tiny").iterdir())


def test_bad_model_files(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("hidden_size: 64\n")
    (tmp_path / "file").write_text("")
    for argv, words in [([str(tmp_path / "missing.json")], "no such file"), ([str(bad)], "intermediate_size"),
                        ([TINY, "-o", str(tmp_path / "file")], "file")]:
        assert main(["zoo", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and words in err, err


def test_smoke_takes_its_own_default_dtype(tmp_path, capsys):
    """`evo zoo MODEL --smoke` refused its own default dtype (bf16, which the CPU interpreter computes wrongly):
    a smoke zoo defaults to fp16, a GPU one to bf16, and the hint to collect names the dtype the runs used."""
    assert main(["zoo", TINY, "--smoke", "-o", str(tmp_path / "smoke")]) == 0
    out = capsys.readouterr().out
    files = sorted((tmp_path / "smoke" / "tiny").glob("*.yaml"))
    assert files and all({p.dtype for p in load_experiment(f).problems} == {"fp16"} for f in files)
    assert "--dtype fp16" in out
    assert main(["zoo", TINY, "-o", str(tmp_path / "gpu")]) == 0
    gpu = sorted((tmp_path / "gpu" / "tiny").glob("*.yaml"))
    assert gpu and all({p.dtype for p in load_experiment(f).problems} == {"bf16"} for f in gpu)


def test_a_5000_digit_number_in_a_model_config_is_one_line(tmp_path, capsys):
    """Python refuses to read an integer of more than 4,300 digits, with a ValueError that was a traceback."""
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + ', "intermediate_size": 128, '
                      '"num_attention_heads": 4, "vocab_size": 256}')
    assert main(["zoo", str(config), "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"evo: error: {config}: holds a number of 5,000 digits"), err


def test_console_script_without_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "evo.surface.cli", "zoo", TINY, "--tokens", "1,y", "-o",
                             str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_run_searches_every_experiment_in_one_run_and_stops_at_a_failure(tmp_path, capsys, monkeypatch):
    """--run hands every experiment to one search (evo.surface.zoo_search, stubbed here: the tiny zoo fixture runs
    the real one), resumes a run an earlier --run left, and stops with the status of a search that did not finish."""
    import evo.surface.zoo_search as zoo_search
    from evo.experiment.rundir import RunDir

    calls = []

    def search_zoo(runs, again, usage_error):
        calls.append([(r.path.name, r.resume) for r in runs])
        rd = RunDir(tmp_path / "tiny" / "tiny_rmsnorm")  # the first run began before the stop
        rd.store.parent.mkdir(parents=True, exist_ok=True)
        rd.store.write_bytes(b"")
        assert "evo zoo" in again and again.endswith("--run")
        return 130

    monkeypatch.setattr(zoo_search, "search_zoo", search_zoo)
    assert main(["zoo", TINY, "--tokens", "32,64", "--dtype", "fp16", "--smoke", "-o", str(tmp_path), "--run"]) == 130
    out = capsys.readouterr().out
    assert len(calls) == 1 and [name for name, _ in calls[0]] == ["rmsnorm.yaml", "gemm.yaml", "attention-causal.yaml",
                                                                 "gemm-residual.yaml", "gemm-swiglu.yaml",
                                                                 "softmax.yaml"]
    assert not any(resume for _, resume in calls[0])
    assert "stopped (exit status 130)" in out and not (tmp_path / "tiny" / "tiny_kernels.py").exists()
    calls.clear()
    assert main(["zoo", TINY, "--tokens", "32,64", "--dtype", "fp16", "--smoke", "-o", str(tmp_path), "--run"]) == 130
    assert calls[0][:2] == [("rmsnorm.yaml", True), ("gemm.yaml", False)]  # the first is resumed, not started again
    text = (tmp_path / "tiny" / "gemm.yaml").read_text()
    assert "min_evaluations: 24" in text  # the floor, written where the user sees it


def test_run_skips_what_was_searched_to_its_budget(tmp_path, capsys, monkeypatch):
    import evo.surface.zoo_search as zoo_search
    from evo.store.sqlite import Store

    calls = []
    monkeypatch.setattr(zoo_search, "search_zoo",
                        lambda runs, again, usage_error: calls.append([r.path.name for r in runs]) or 130)
    args = ["zoo", TINY, "--tokens", "32,64", "--dtype", "fp16", "--smoke", "-o", str(tmp_path), "--run"]
    assert main(args) == 130 and calls[0][0] == "rmsnorm.yaml"
    (tmp_path / "tiny" / "tiny_rmsnorm").mkdir()
    with Store(tmp_path / "tiny" / "tiny_rmsnorm" / "store.sqlite") as store:  # as a finished search leaves it
        for key in ("rmsnorm:32x64:fp16", "rmsnorm:64x64:fp16"):
            store.set_meta(f"summary:{key}", {"reason": "evaluations"})
    run = tmp_path / "tiny" / "tiny_rmsnorm"
    (run / "experiment.yaml").write_text((tmp_path / "tiny" / "rmsnorm.yaml").read_text())  # the run's copy
    calls.clear()
    assert main(args) == 130 and "rmsnorm.yaml" not in calls[0] and calls[0][0] == "gemm.yaml"
    assert "rmsnorm: norm T=32, norm T=64 (searched to its budget earlier: nothing to do)" in capsys.readouterr().out
    calls.clear()  # a larger budget is another search: resumed, not skipped
    assert main([*args, "--wall-s", "99"]) == 130 and calls[0][0] == "rmsnorm.yaml"


def test_two_config_jsons_get_two_folders_and_name_sets_one(tmp_path, capsys):
    import json

    llama = json.loads((ROOT / "experiments" / "models" / "llama-3.2-1b.json").read_text())
    for model in ("Llama-A", "Llama-B"):
        (tmp_path / model).mkdir()
        (tmp_path / model / "config.json").write_text(json.dumps(llama))
        assert main(["zoo", str(tmp_path / model / "config.json"), "--tokens", "1", "-o", str(tmp_path / "out")]) == 0
    assert main(["zoo", str(tmp_path / "Llama-A" / "config.json"), "--name", "mine", "--tokens", "1",
                 "-o", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["Llama-A", "Llama-B", "mine"]
    out = capsys.readouterr().out
    assert "--name mine --tokens 1" in out  # the printed --collect command finds the same folder
    experiments = sorted((tmp_path / "out" / "mine").glob("*.yaml"))
    assert experiments and all(load_experiment(e).name == f"mine_{e.stem}" for e in experiments)
    assert main(["zoo", str(tmp_path / "Llama-A" / "config.json"), "--name", "../up", "-o", str(tmp_path)]) == 2
    assert "name: expected letters" in capsys.readouterr().err


def test_a_context_past_the_sliding_window_is_refused(tmp_path, capsys):
    import json

    config = json.loads((ROOT / "experiments" / "models" / "mistral-7b.json").read_text())
    (tmp_path / "mistral.json").write_text(json.dumps({**config, "sliding_window": 4096}))
    args = ["zoo", str(tmp_path / "mistral.json"), "-o", str(tmp_path / "out"), "--tokens", "1"]
    assert main([*args, "--context", "4095"]) == 0  # 4095 + 1 fits the window: full attention is the same
    capsys.readouterr()
    assert main([*args, "--context", "4096"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sliding window of its last 4096 tokens" in err
