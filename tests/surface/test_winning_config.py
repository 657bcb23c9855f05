"""`evo export RUN --shape S --config`: the winning configuration printed for a user's own kernel (issue 41)."""

from __future__ import annotations

import json

import pytest

from evo.store.sqlite import Store
from evo.surface.cli import main
from evo.surface.export import export_one
from evo.surface.winning_config import config_parts
from tests.fixtures.run_fixture import make_run


def test_genes_split_into_constexprs_launch_options_and_evos_structure():
    kwargs, options, rest = config_parts({"BLOCK_M": 64, "num_warps": 4, "num_stages": 3, "split_k": 2, "GROUP_M": 8})
    assert kwargs == {"BLOCK_M": 64, "GROUP_M": 8} and options == {"num_warps": 4, "num_stages": 3}
    assert rest == {"split_k": 2}


def test_export_config_prints_the_elites_genes_and_a_triton_config(tmp_path, capsys):
    import triton

    run = make_run(tmp_path, shapes=("64x64x64", "48x80x64"), dtype="fp32")
    with Store(run / "store.sqlite", readonly=True) as store:
        genes = json.loads(export_one(store, (48, 80, 64))[1].evaluation.genome)["genes"]
    before = sorted(p.name for p in run.iterdir())
    assert main(["export", str(run), "--shape", "48x80x64", "--config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gemm:48x80x64:fp32: ") and "ms GPU time" in out[0]
    assert out[1] == "  genes: " + " ".join(f"{k}={v}" for k, v in sorted(genes.items()))
    config = eval(out[2].strip(), {"triton": triton})  # the line is a real triton.Config call
    assert config.kwargs == {k: v for k, v in genes.items() if k.isupper()}
    assert (config.num_warps, config.num_stages) == (genes["num_warps"], genes["num_stages"])
    as_dict = json.loads(out[3].split("as a dict: ")[1])
    assert as_dict == {"kwargs": config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    assert "split_k=" in out[4] and "no triton.Config field" in out[4]
    assert sorted(p.name for p in run.iterdir()) == before  # nothing written
    assert main(["export", str(run), "--all", "--config"]) == 0
    assert sum(line.strip().startswith("triton.Config(") for line in capsys.readouterr().out.splitlines()) == 2


@pytest.mark.parametrize("extra", [["-o", "k.py"]])
def test_config_writes_no_file(tmp_path, capsys, extra):
    run = make_run(tmp_path)
    assert main(["export", str(run), "--shape", "64x64x64", "--config", *extra]) == 2
    assert "writes no module" in capsys.readouterr().err
