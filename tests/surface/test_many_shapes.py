"""A run of thousands of shapes answers `evo status`, `evo export` and `evo report` in seconds (issue 42: 10,000
shapes took 47 s for status and 41 s for report). The store is written straight (tests/fixtures/many_shapes.py),
2,000 shapes of 4 rows; each command's bound is several times what linear work takes on a loaded 2-core machine
(about 1 s each), and far below what work per problem that grows with the number of problems takes (a registry
look-up per problem alone costs 20 ms, 40 s here). `python -m tests.fixtures.many_shapes DIR 10000` makes the
issue's size by hand."""

from __future__ import annotations

import time

import pytest

from evo.surface.cli import main
from tests.fixtures.many_shapes import make_many_shapes_run, shapes

SHAPES = 2_000
BOUND_S = 8.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_many_shapes_run(tmp_path_factory.mktemp("many"), SHAPES)


def _timed(argv: list[str]) -> float:
    start = time.perf_counter()
    assert main(argv) == 0
    return time.perf_counter() - start


@pytest.mark.slow
def test_status_of_thousands_of_shapes_is_quick(run, capsys):
    seconds = _timed(["status", str(run)])
    out = capsys.readouterr().out
    last = "x".join(map(str, shapes(SHAPES)[-1]))
    assert f"{SHAPES * 4} evaluations" in out and f"gemm:{last}:fp16 " in out
    assert seconds < BOUND_S, f"evo status of {SHAPES} shapes took {seconds:.1f} s"


@pytest.mark.slow
def test_export_of_one_shape_reads_only_its_rows(run, tmp_path, capsys):
    seconds = _timed(["export", str(run), "--shape", "128x64x64", "-o", str(tmp_path / "k.py")])
    assert "elite of gemm:128x64x64:fp16" in capsys.readouterr().out
    assert seconds < BOUND_S / 4, f"evo export --shape among {SHAPES} shapes took {seconds:.1f} s"
    assert main(["export", str(run), "--shape", "1x2x3", "-o", str(tmp_path / "no.py")]) == 2
    err = capsys.readouterr().err
    assert f"and {SHAPES - 12} more" in err and len(err) < 1000  # the refusal names a few, not thousands


@pytest.mark.slow
def test_export_all_and_report_of_thousands_of_shapes_are_quick(run, tmp_path, capsys):
    seconds = _timed(["report", str(run), "-o", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text()
    assert 'id="detailed-only"' in page and f"measured {SHAPES} problems" in page
    assert seconds < BOUND_S, f"evo report of {SHAPES} shapes took {seconds:.1f} s"
    seconds = _timed(["export", str(run), "--all", "-o", str(tmp_path / "all.py")])
    assert f"{SHAPES} elites" in capsys.readouterr().out
    assert seconds < 4 * BOUND_S, f"evo export --all of {SHAPES} shapes took {seconds:.1f} s"
