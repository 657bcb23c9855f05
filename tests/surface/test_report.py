"""`evo report`: one self-contained HTML file; every text from the run escaped; data that matches the store."""

from __future__ import annotations

import html
import json
import re

import pytest

from evo.store.record import Evaluation
from evo.store.sqlite import Store
from evo.surface.cli import main
from evo.surface.report import ReportInput, build_report, embed_json, report_data
from tests.fixtures.run_fixture import make_run

EVIL = "</script><script>window.pwned=1</script><!-- & <img src=x onerror=alert(1)>"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    path = make_run(tmp_path_factory.mktemp("runs"), shapes=("64x64x64", "48x80x64"),
                    descriptors=("tile_area", "block_k", "num_warps"))
    with Store(path / "store.sqlite") as store:
        first = next(store.iter("gemm:64x64x64:fp16"))
        # a failure whose text tries to break out of the page (test data)
        store.add(Evaluation(operator="gemm", problem_key=first.problem_key, problem=first.problem,
                             genome=first.genome, genome_hash=first.genome_hash, source_hash=first.source_hash,
                             status="crashed", reason=EVIL, gpu=EVIL, worker="test-fixture", origin="test-fixture"))
        store.set_meta("evil", EVIL)
    return path


def _data_of(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="evo-data">(.*?)</script>', page, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1))


def test_report_is_self_contained_and_escaped(run, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(run), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "Plotly" in page and len(page) > 1_000_000  # plotly.js is inline
    assert not re.search(r"<script[^>]+src=", page)  # no external script: works offline
    assert "window.pwned" in page and EVIL not in page  # present, but never as markup
    assert html.escape(EVIL) in page
    assert page.count("</script>") == page.count("<script")  # nothing closed a script early
    data = _data_of(page)
    assert data["run"]["store_meta"]["evil"] == EVIL  # the JSON round-trips exactly


def test_report_data_matches_the_store(run):
    with Store(run / "store.sqlite") as store:
        from evo.experiment.config import load_experiment

        exp = load_experiment(run / "experiment.yaml")
        data = report_data(ReportInput(store, "fixture", exp, ""))
        p = data["problems"][0]
        assert p["key"] == "gemm:64x64x64:fp16"
        assert p["summary"]["evaluations"] == store.count("gemm:64x64x64:fp16")
        assert p["status_counts"]["crashed"] == 1
        assert p["projected"] and p["x"]["name"] == "tile_area" and p["y"]["name"] == "block_k"
        best = min((ev for ev in store.iter(p["key"], "ok")), key=lambda ev: ev.median_ms)
        top = p["elites"][0]
        assert top["median_ms"] == pytest.approx(best.median_ms, rel=1e-3)
        assert top["source"] == best.source_hash and data["sources"][top["source"]].strip()
        assert "@triton.jit" in data["sources"][top["source"]]
        assert len(p["history"]["evaluations"]) == p["summary"]["evaluations"]
        assert p["history"]["best"][-1] == pytest.approx(top["throughput"], rel=1e-3)
        # a cell holds the best elite of its (x, y) column over the third descriptor
        cells = [(e["x"], e["y"]) for e in p["elites"]]
        assert len(cells) == len(set(cells))
        failed = sum(sum(f["counts"].values()) for f in p["failures"]) + p["unplaced_failures"]
        assert failed == p["summary"]["evaluations"] - p["summary"]["ok"]


def test_descriptor_choice(run, tmp_path, capsys):
    out = tmp_path / "r.html"
    assert main(["report", str(run), "-o", str(out), "--x", "num_warps", "--y", "tile_area"]) == 0
    p = _data_of(out.read_text())["problems"][0]
    assert (p["x"]["name"], p["y"]["name"]) == ("num_warps", "tile_area")
    assert p["x"]["ticks"] == ["2", "4", "8"]
    capsys.readouterr()
    assert main(["report", str(run), "-o", str(out), "--x", "registers"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tile_area, block_k, num_warps" in err
    assert main(["report", str(run), "-o", str(out), "--x", "block_k", "--y", "block_k"]) == 2


def test_default_output_path(run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the report goes into the run directory, never into the current one
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").stat().st_size > 1_000_000 and not (tmp_path / "reports").exists()


def test_smoke_report_is_labelled(tmp_path):
    path = make_run(tmp_path, name="smk", smoke=True, n_random=3)
    with Store(path / "store.sqlite") as store:
        page = build_report(ReportInput(store, "smk"))
    assert "NOT a timing" in page.split('<script type="application/json"')[0]


def test_embed_json_cannot_close_a_script():
    text = embed_json({"a": "</script><!--", "b": "\u2028&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!--", "b": "\u2028&"}


def test_missing_run_directory(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert "no such run directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    assert "not a run directory" in capsys.readouterr().err
