"""`evo zoo MODEL --report`: the zoo's page from its runs' stores (test rows, tests/fixtures/run_fixture.py) and the
layer benchmark's zoo.json: each role's elite against its baseline, the layer's goals, the roofline and the time
breakdown computed from the stores; a smoke zoo shows no time; bad input is one line."""

from __future__ import annotations

import json
import re

import pytest

from evo.surface.cli import main
from evo.zoo.problems import run_name
from tests.fixtures.run_fixture import make_run
from tests.fixtures.zoo_report_fixture import ARGS, SPEC
from tests.fixtures.zoo_report_fixture import fixture_zoo as _zoo
from tests.fixtures.zoo_report_fixture import layer_doc as _layer_doc


def _data(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="evo-data">(.*?)</script>', page, re.S)[1])


def test_the_report_holds_every_role_its_layer_and_its_roofline(tmp_path, capsys):
    folder = _zoo(tmp_path)
    (folder / "zoo.json").write_text(json.dumps(_layer_doc()))
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    assert "report.html" in capsys.readouterr().out
    page = (folder / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and not re.search(r"<script[^>]+src=", page)
    assert "&lt;b&gt;why&lt;/b&gt;" in page and "<b>why</b>" not in page.split('id="evo-data"')[0]
    data = _data(page)
    # nine roles at two token counts (the decode plan: cache_attention beside attention+causal)
    assert not data["smoke"] and len(data["kernels"]) == 2 * 9
    for row in data["kernels"]:
        assert row["status"] == "measured", row
        # the fixture's baseline takes 0.05 ms and its elites 0.03-0.13 ms: the ratio is the one of the store
        assert row["ratio"] == pytest.approx(0.05 / row["ms"], rel=5e-3) and row["baseline"] == "torch-test"
        assert row["tflops"] > 0 and row["intensity"] > 0
    attention = [r for r in data["kernels"] if r["role"] == "attention"]
    assert [r["shape"] for r in attention] == ["1x4x2x1x9x16", "1x4x2x4x12x16"]
    b = data["breakdown"]
    assert b["tokens"] == [1, 4] and "sampling_softmax" not in b["roles"]  # the layer's kernels only
    assert "norm" not in b["roles"]  # fused into linear_qkv and linear_gate_up at these token counts
    qkv = next(r for r in data["kernels"] if r["role"] == "linear_qkv" and r["tokens"] == 4)
    assert b["evo"]["linear_qkv"][1] == pytest.approx(qkv["ms"], rel=1e-3)
    rf = data["overview"]["roofline"]
    assert len(rf["points"]) == 2 * 9 and rf["peak_tflops"] >= max(p["y"] for p in rf["points"]) * 0.999
    # the layer's goals: vs compile under graphs 0.1 / 0.09 = 1.11x met at T=1, 0.1 / 0.2 = 0.5x not met at T=4
    assert page.count('class="num met"') == 1 + 2 and page.count('class="num miss"') == 1
    assert 'id="layer-plot"' in page and 'id="roofline"' in page and 'id="breakdown-plot"' in page


def test_a_smoke_zoo_shows_no_time(tmp_path):
    folder = _zoo(tmp_path, smoke=True)
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    page = (folder / "report.html").read_text()
    data = _data(page)
    assert data["smoke"] and data["breakdown"] is None and data["overview"]["roofline"] is None
    assert all("ms" not in r and "ratio" not in r for r in data["kernels"])
    assert "Smoke zoo" in page and 'id="roofline-none"' in page and 'id="layer-none"' in page


def test_missing_runs_are_rows_not_errors(tmp_path):
    folder = tmp_path / SPEC.name
    make_run(folder, name=run_name(SPEC, "linear+rmsnorm"), operator="linear+rmsnorm",
             shapes=("1x128x64", "4x128x64"), n_random=3)
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    rows = _data((folder / "report.html").read_text())["kernels"]
    assert {r["status"] for r in rows if r["operator"] != "linear+rmsnorm"} == {"not searched (no run)"}
    assert {r["status"] for r in rows if r["role"] == "linear_qkv"} == {"measured"}


@pytest.mark.parametrize("setup, extra, words", [
    (None, ["--report"], "no zoo at"),
    ("other", ["--report"], "holds the layer of 'llama'"),
    ("garbage", ["--report"], "cannot read the layer results"),
    ("ok", ["--report", "--collect"], "one at a time"),
])
def test_bad_input_is_one_line(tmp_path, capsys, setup, extra, words):
    if setup is not None:
        folder = tmp_path / SPEC.name
        folder.mkdir()
        if setup == "other":
            (folder / "zoo.json").write_text(json.dumps(_layer_doc("llama")))
        elif setup == "garbage":
            (folder / "zoo.json").write_text("{not json")
    assert main(["zoo", *ARGS, "-o", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def test_a_missing_plotly_is_one_line(tmp_path, capsys, monkeypatch):
    """plotly absent (the GPU image has none): one line naming the package, the zoo's runs untouched."""
    import sys

    _zoo(tmp_path)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # import of it raises ModuleNotFoundError
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'plotly'" in err[0] and "pip install plotly" in err[0], err


def test_the_report_says_which_budgets_were_cut_short(tmp_path):
    from evo.store.sqlite import Store

    folder = _zoo(tmp_path)
    with Store(folder / "tiny_linear-rmsnorm-swiglu" / "store.sqlite") as store:  # a search that ended on its budget
        keys = store.problem_keys()
        store.set_meta(f"summary:{keys[0]}", {"reason": "wall_s"})
        for key in keys[1:]:
            store.set_meta(f"summary:{key}", {"reason": "wall_s", "exhausted": True})
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    page = (folder / "report.html").read_text()
    norms = {r["key"]: r["cut_short"] for r in _data(page)["kernels"] if r["role"] == "linear_gate_up"}
    assert norms[keys[0]].startswith("cut short:") and "(stopped by wall_s)" in norms[keys[0]]
    assert all(norms[k] == "" for k in keys[1:])  # an exhausted space was searched in full
    gemm = next(r for r in _data(page)["kernels"] if r["role"] == "linear_qkv")
    assert "(interrupted, or still running)" in gemm["cut_short"]  # no summary: the search never ended
    assert "stopped by wall_s" in page.split('id="evo-data"')[0]  # in the table, not only in the data


def test_the_report_says_what_the_module_runs_per_role_and_why(tmp_path):
    folder = _zoo(tmp_path)
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    page = (folder / "report.html").read_text()
    rows = _data(page)["kernels"]
    for r in rows:  # evo's elite only where it beat the baseline timed beside it
        assert r["runs"] == ("evo" if r["ratio"] > 1 else "baseline"), r
        shown = float(r["runs_why"].split("x torch-test on the gpu clock")[0].split()[-1])
        assert shown == pytest.approx(r["ratio"], rel=5e-3)  # (the row's ratio is rounded to 3 digits)
    assert {r["runs"] for r in rows} == {"evo", "baseline"}  # the fixture's elites win some and lose some
    assert "module runs" in page


def test_a_smoke_zoo_claims_no_win(tmp_path):
    folder = _zoo(tmp_path, smoke=True)
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    rows = _data((folder / "report.html").read_text())["kernels"]
    assert all(r["runs"] == "evo" and "no win claimed" in r["runs_why"] for r in rows)
