"""The report in a real headless browser (Debian's chromium, driven over the DevTools pipe): the plots render,
and a real mouse click on a heatmap cell shows that cell's kernel source."""

from __future__ import annotations

import json
import re

import pytest

from evo.store.sqlite import Store
from evo.surface.cli import main
from tests.fixtures.cdp import Browser, find_chromium
from tests.fixtures.run_fixture import make_run

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")


def _opened(b: Browser, run, page) -> None:
    """Write `run`'s report to `page` with `evo report`, open it in `b` and wait until its plots are drawn."""
    assert main(["report", str(run), "-o", str(page)]) == 0
    b.open(page.as_uri())
    b.wait_for("window.evoReport && (window.evoReport.ready || window.evoReport.error)", timeout=90)
    assert b.eval("window.evoReport.error || ''") == ""


@pytest.mark.slow
def test_heatmap_renders_and_a_click_shows_the_kernel(tmp_path):
    run = make_run(tmp_path / "runs", shapes=("64x64x64", "48x80x64"), clean_shapes=("48x80x64",))
    page = tmp_path / "report.html"
    with Browser(CHROMIUM) as b:
        _opened(b, run, page)
        # plotly drew one heatmap per problem, with a cell per elite
        n_cells = b.eval("document.querySelectorAll('#heat-0 .hm image, #heat-0 .hm').length")
        assert n_cells >= 1
        # the roofline, 4 plots for the first problem (heatmap, failures, history, emitters) and 3 for the second
        # (nothing failed: a line, not a blank map)
        assert b.eval("document.querySelectorAll('.js-plotly-plot').length") == 8
        data = json.loads(b.eval("document.getElementById('evo-data').textContent"))
        assert b.eval("document.getElementById('source-0').textContent") == "Click a cell of the heatmap."
        assert [bool(p["failures"]) for p in data["problems"]] == [True, False]
        title = b.eval("document.getElementById('fail-0').layout.title.text")
        assert title == "Failures: share of the cell's evaluations"
        assert b.eval("document.getElementById('fail-1').textContent") == \
            "Failures: none. No evaluation of this problem failed."

        # click the centre of the heatmap cell of the second-best elite of the first problem
        target = data["problems"][0]["elites"][1]
        b.eval("document.getElementById('heat-0').scrollIntoView()")
        centre = b.eval(f"window.evoReport.cellCenter(0, {target['x']}, {target['y']})")
        b.click(centre["x"], centre["y"])
        b.wait_for("window.evoReport.shown !== null", timeout=10)
        shown = b.eval("window.evoReport.shown")
        assert shown == {"problem": 0, "elite": 1, "source": target["source"]}
        source = b.eval("document.getElementById('source-0').textContent")
        assert source == data["sources"][target["source"]] and "@triton.jit" in source
        assert target["genome_hash"] in source  # the rendered module names its genome
        info = b.eval("document.getElementById('info-0').textContent")
        assert target["genome"] in info

        # an empty cell shows nothing new
        empty = next((x, y) for x in range(data["problems"][0]["nx"]) for y in range(data["problems"][0]["ny"])
                     if not any(e["x"] == x and e["y"] == y for e in data["problems"][0]["elites"]))
        centre = b.eval(f"window.evoReport.cellCenter(0, {empty[0]}, {empty[1]})")
        b.click(centre["x"], centre["y"])
        assert b.eval("window.evoReport.clicks") == 1
        # the colour switch recolours the heatmap by ratio to the baseline
        b.eval("const s = document.getElementById('colour-0'); s.value = 'ratio';"
               "s.dispatchEvent(new Event('change'))")
        y, x = target["y"], target["x"]
        trace = b.eval("(() => { const t = document.getElementById('heat-0').data[0];"
                       f" return {{zmid: t.zmid, title: t.colorbar.title.text, z: t.z[{y}][{x}]}}; }})()")
        assert trace == {"zmid": 1, "title": "ratio to torch-test", "z": target["ratio"]}
        b.screenshot(str(tmp_path / "report.png"))
        assert (tmp_path / "report.png").stat().st_size > 10_000


HOSTILE = "<img src=x onerror=window.pwned=1>"


def _visible_text(b: Browser) -> str:
    """What a reader sees: the page's text and every plot's SVG text (titles, ticks, colour bars, legends)."""
    return b.eval("document.body.innerText + ' ' + [...document.querySelectorAll('svg text')]"
                  ".map((t) => t.textContent).join(' ')")


def test_the_report_reads_well(tmp_path):
    """Overview and roofline on top, ticks in people's units, no toolbar, numbers whole, metadata as tables, run
    text escaped everywhere (the colour bar's title too); and a smoke run's scores never carry a unit."""
    import sqlite3

    run = make_run(tmp_path / "runs", shapes=("64x64x64", "48x80x64"), descriptors=("tile_area", "structure"))
    with sqlite3.connect(run / "store.sqlite") as db:  # a second baseline, named by someone hostile
        db.execute("UPDATE evaluations SET baseline=? WHERE id % 2 = 0", (HOSTILE,))
    page = tmp_path / "report.html"
    with Browser(CHROMIUM) as b:
        _opened(b, run, page)
        # the overview comes first: a ratio to each measured baseline, and the roofline with its ceilings
        assert b.eval("document.querySelector('section').id") == "overview"
        head = b.eval("[...document.querySelectorAll('#overview th')].map((t) => t.textContent)")
        assert f"ratio to {HOSTILE}" in head and "ratio to torch-test" in head and "geometric mean" in head
        names = b.eval("document.getElementById('roofline').data.map((t) => t.name)")
        assert names[0] == "measured ceilings" and len(names) == 3
        assert b.eval("document.getElementById('roofline').layout.xaxis.type") == "log"
        # axes in people's units: tiles as M×N, structures by name
        ticks = b.eval("document.getElementById('heat-0').data[0]")
        assert "64×64" in ticks["x"] and "12" not in ticks["x"] and "TMA+persistent" in ticks["y"]
        assert b.eval("document.querySelectorAll('.modebar').length") == 0  # no toolbar over the titles
        # numbers are never broken mid-token: each numeric cell is one line
        lines = b.eval("[...document.querySelectorAll('td.num')].map((td) => { const r = document.createRange();"
                       " r.selectNodeContents(td); return r.getClientRects().length; })")
        assert len(lines) > 20 and set(lines) == {1}
        # run metadata as tables: no raw dict, no long float
        meta = b.eval("document.getElementById('metadata').innerText")
        assert "{" not in meta and not re.search(r"\\d\\.\\d{7,}", meta)
        # the colour bar's title is escaped too (switched to the ratio to the hostile baseline)
        b.eval("const s = document.getElementById('colour-0'); s.value = 'ratio'; s.dispatchEvent(new Event('change'))")
        assert HOSTILE in _visible_text(b)  # shown as text ...
        assert b.eval("document.querySelectorAll('#overview img, .js-plotly-plot img, svg img').length") == 0
        assert b.eval("window.pwned === undefined")  # ... never run
        b.screenshot(str(tmp_path / "report-top.png"))
        assert (tmp_path / "report-top.png").stat().st_size > 30_000

    smoke = make_run(tmp_path / "runs", name="smk", smoke=True, n_random=4)
    with Store(smoke / "store.sqlite") as store:  # as evo.search records it: the target rendered for
        store.set_meta("target", {"name": "hopper", "arch": 90, "smem_bytes": 232448, "num_sms": 132})
    page = tmp_path / "smoke.html"
    with Browser(CHROMIUM) as b:
        _opened(b, smoke, page)
        text = _visible_text(b)
        assert "TFLOP/s" not in text and "GB/s" not in text  # a stand-in score is no throughput
        assert text.count("stand-in score, NOT a timing") >= 3  # overview, summary, heatmap's colour bar
        assert "CPU Triton interpreter" in b.eval("document.getElementById('metadata').innerText")
        assert "a smoke run times nothing" in b.eval("document.getElementById('roofline-none').textContent")
        b.screenshot(str(tmp_path / "smoke.png"), full_page=True)
        assert (tmp_path / "smoke.png").stat().st_size > 30_000


@pytest.mark.slow
def test_the_zoo_page_draws_its_plots(tmp_path):
    from tests.fixtures.zoo_report_fixture import ARGS, fixture_zoo, layer_doc

    folder = fixture_zoo(tmp_path)
    (folder / "zoo.json").write_text(json.dumps(layer_doc()))
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--report"]) == 0
    with Browser(CHROMIUM) as b:
        b.open((folder / "report.html").as_uri())
        b.wait_for("window.evoZooReport && (window.evoZooReport.ready || window.evoZooReport.error)", timeout=90)
        assert b.eval("window.evoZooReport.error || ''") == ""
        assert b.eval("document.querySelectorAll('.js-plotly-plot').length") == 3  # roofline, layer, breakdown
        assert b.eval("document.getElementById('breakdown-plot').data.length") == 2 * 7  # seven layer roles, twice
