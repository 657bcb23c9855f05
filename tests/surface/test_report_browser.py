"""The report in a real headless browser (Debian's chromium, driven over the DevTools pipe): the plots render,
and a real mouse click on a heatmap cell shows that cell's kernel source."""

from __future__ import annotations

import json

import pytest

from evo.surface.cli import main
from tests.fixtures.cdp import Browser, find_chromium
from tests.fixtures.run_fixture import make_run

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")


@pytest.mark.slow
def test_heatmap_renders_and_a_click_shows_the_kernel(tmp_path):
    run = make_run(tmp_path / "runs", shapes=("64x64x64", "48x80x64"), clean_shapes=("48x80x64",))
    page = tmp_path / "report.html"
    assert main(["report", str(run), "-o", str(page)]) == 0
    with Browser(CHROMIUM) as b:
        b.open(page.as_uri())
        b.wait_for("window.evoReport && (window.evoReport.ready || window.evoReport.error)", timeout=90)
        assert b.eval("window.evoReport.error || ''") == ""
        # plotly drew one heatmap per problem, with a cell per elite
        n_cells = b.eval("document.querySelectorAll('#heat-0 .hm image, #heat-0 .hm').length")
        assert n_cells >= 1
        assert b.eval("document.querySelectorAll('.js-plotly-plot').length") == 8  # 4 plots x 2 problems
        data = json.loads(b.eval("document.getElementById('evo-data').textContent"))
        assert b.eval("document.getElementById('source-0').textContent") == "Click a cell of the heatmap."
        # the failure map's title says whether anything failed (an empty map alone does not)
        assert [bool(p["failures"]) for p in data["problems"]] == [True, False]
        titles = [b.eval(f"document.getElementById('fail-{pi}').layout.title.text") for pi in (0, 1)]
        assert titles == ["Failures: share of the cell's evaluations",
                          "Failures: none (no evaluation of this problem failed)"]

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
