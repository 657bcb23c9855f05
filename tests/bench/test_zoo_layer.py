"""The layer benchmark on the CPU: the tiny model's zoo (smoke searches, collected), then
`python -m evo.bench.zoo_layer ... --device cpu`: zoo.json's schema, errors within tolerance, and a broken zoo
reported as outside it."""

from __future__ import annotations

import json

import pytest

from evo.bench import zoo_layer
from evo.bench.zoo_layer_results import TIME_KEYS, WAYS
from tests.fixtures.tiny_zoo import TINY


@pytest.fixture
def zoo(tiny_zoo):  # the session's one tiny zoo (tests/conftest.py): searched once for both of its test files
    return tiny_zoo


def bench(zoo, out, *extra):
    return zoo_layer.main([str(zoo), str(TINY), "--device", "cpu", "--dtype", "fp16", "--tokens", "1,4",
                           "--rounds", "1", "--out", str(out), *extra])


@pytest.mark.slow
def test_the_zoo_layer_on_the_cpu_is_within_tolerance(zoo, tmp_path, capsys):
    assert bench(zoo, tmp_path) == 0
    doc = json.loads((tmp_path / "zoo.json").read_text())
    assert doc["model"] == "tiny" and doc["dtype"] == "fp16" and doc["gpu"] == "cpu"
    assert doc["zoo_module"] == str(zoo.resolve()) and "torch" in doc["versions"]
    # the decode plan's roles (no rope: this layer has no KV cache)
    assert doc["roles"] == {"linear_qkv": "linear+rmsnorm", "attention": "attention+causal",
                            "linear_o_proj": "linear+residual", "linear_gate_up": "linear+rmsnorm+swiglu",
                            "linear_down": "linear+residual"}
    assert [layer["tokens"] for layer in doc["layers"]] == [1, 4]
    for layer in doc["layers"]:
        assert layer["eager_ms"] > 0 and layer["zoo_eager_ms"] > 0
        assert all(layer[k] is None for k in TIME_KEYS if k not in ("eager_ms", "zoo_eager_ms"))
        assert layer["failures"] == {"compile": "needs CUDA", "zoo_compile": "needs CUDA",
                                     **{f"{w}_graph": "needs CUDA" for w in WAYS}}
        assert set(layer["errors"]) == {"zoo_eager"}
        assert layer["tolerance"] == 3e-3 and layer["max_rel_error"] <= layer["tolerance"]
        assert layer["within_tolerance"]
    table = (tmp_path / "zoo.md").read_text()
    main_table = table.split("\n## ")[0]
    assert table == capsys.readouterr().out and main_table.count("\n| ") == 4 and "WRONG" not in table
    # the floor's bytes on the CPU, but no copy bandwidth there: no floor, no share (tests/bench/test_zoo_floor.py)
    assert doc["copy_GBps"] is None and "none on this device: no floor" in table
    for layer in doc["layers"]:
        assert layer["floor"]["bytes"] > layer["floor"]["weights_bytes"] > 0 and layer["floor"]["hbm_ms"] is None
        assert layer["floor_share"] == {}


@pytest.mark.slow
def test_profile_says_where_the_time_goes(zoo, tmp_path, capsys):
    from evo.bench.zoo_profile import BUCKETS

    assert bench(zoo, tmp_path, "--profile", "--tokens", "1") == 0
    layer, = json.loads((tmp_path / "zoo.json").read_text())["layers"]
    assert set(layer["profile"]) == {"eager", "zoo_eager"} and layer["profile_failures"] == {}
    for way, p in layer["profile"].items():
        assert p["call_us"] == pytest.approx(layer[f"{way}_ms"] * 1e3, rel=1e-3)
        assert p["kernel_us_per_call"] > 0 and set(p["buckets"]) == set(BUCKETS)
        assert p["kernels"] and all(k["us"] > 0 and k["count"] > 0 for k in p["kernels"])
    assert any(k["name"].startswith("aten::") for k in layer["profile"]["eager"]["kernels"])
    table = (tmp_path / "zoo.md").read_text()
    assert "## Where the time goes (GPU kernel µs per layer call)" in table and "\n| zoo_eager | " in table
    err = capsys.readouterr().err
    assert "T=1, microseconds per layer call:" in err and "zoo_eager" in err


@pytest.mark.slow
def test_a_broken_zoo_is_reported_outside_its_tolerance(zoo, tmp_path, monkeypatch, capsys):
    from evo.api import load_zoo

    def broken(path):
        ops = load_zoo(path)
        ops["linear_o_proj"] = lambda a, w, residual: a @ w.t()  # drops the residual
        return ops

    monkeypatch.setattr("evo.api.load_zoo", broken)
    assert bench(zoo, tmp_path) == 1
    doc = json.loads((tmp_path / "zoo.json").read_text())
    for layer in doc["layers"]:
        assert layer["max_rel_error"] > layer["tolerance"] and not layer["within_tolerance"]
    assert (tmp_path / "zoo.md").read_text().count("WRONG") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "outside its tolerance at T=1,4" in err[-1]


def test_without_cuda_it_refuses_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert zoo_layer.main([str(tmp_path / "z.py"), str(TINY), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none is visible" in err[0]
    assert not (tmp_path / "zoo.json").exists()


def test_bad_arguments_are_one_line(tmp_path, capsys):
    for extra, says in ((["--tokens", "0"], "not a positive integer"), (["--dtype", "int8"], "--dtype"),
                        ([], "cannot read it")):
        assert zoo_layer.main([str(tmp_path / "missing.py"), str(TINY), "--device", "cpu", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err


@pytest.mark.slow
def test_the_decode_loop_on_the_cpu(zoo, tmp_path, capsys):
    assert bench(zoo, tmp_path, "--tokens", "1", "--context", "6", "--decode-steps", "4") == 0
    doc = json.loads((tmp_path / "zoo.json").read_text())
    d = doc["decode"]
    assert d["steps"] == 4 and d["context"] == 6 and d["capacity"] >= 10 and d["tokens"] == 1
    assert d["eager_ms"] > 0 and d["zoo_eager_ms"] > 0  # the zoo's GEMMs and norms in the interpreter
    assert set(d["errors"]) == {"zoo_eager"} and d["within_tolerance"]
    assert d["failures"] == {"compile": "needs CUDA", "zoo_compile": "needs CUDA",
                             **{f"{w}_graph": "needs CUDA" for w in WAYS}}
    assert "SDPA" in d["note"] and d["zoo_vs_torch_graphs"] is None
    table = (tmp_path / "zoo.md").read_text()
    assert "## Decode loop: 4 steps of one token after 6 cached" in table and "| per call | " in table


def test_bad_decode_steps_are_one_line(zoo, tmp_path, capsys):
    assert bench(zoo, tmp_path, "--decode-steps", "-1") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--decode-steps" in err
