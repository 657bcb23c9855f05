"""Never slower than what it replaces (issue 40, item 2): `evo export --all` runs evo's elite for a problem only where
it beat its baseline side by side; elsewhere the baseline it was timed against. Rows are made-up TEST DATA."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import operators
from evo.evaluate.modules import source_hash
from evo.problem import HOPPER
from evo.store.record import Evaluation
from evo.store.sqlite import Store
from evo.surface.export import export_all
from evo.surface.kernel_choice import choose

OP = operators.get("gemm")
WINS, LOSES = OP.problem((32, 64, 64), "fp32"), OP.problem((16, 64, 64), "fp32")


def row(problem, ms, baseline_ms, gpu="TEST DATA GPU"):
    genome = OP.family.seeds(problem, HOPPER)[0]
    return Evaluation(operator="gemm", problem_key=problem.key, problem=problem.to_json(), genome=genome.canonical(),
                      genome_hash=genome.hash, source_hash=source_hash(genome.canonical()), status="ok", gpu=gpu,
                      versions={"triton": "t"}, median_ms=ms, baseline_ms=baseline_ms, baseline="cublas",
                      objective="gpu", worker="test-data")


def _module(text, tmp_path):
    path = tmp_path / "elites.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("evo_test_elites", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_problem_whose_elite_lost_runs_its_baseline(tmp_path, monkeypatch):
    monkeypatch.setenv("EVO_KERNEL_DIR", str(tmp_path / "kernels"))
    with Store(tmp_path / "s.sqlite") as store:
        store.add(row(WINS, 0.010, 0.012))  # 1.2x cublas
        store.add(row(LOSES, 0.010, 0.009))  # 0.9x cublas
        text, found = export_all(store)
    assert {e.problem.key for e in found} == {WINS.key, LOSES.key}
    assert f"{WINS.key}: " in text and "runs evo: 1.200x cublas on the gpu clock" in text
    assert "runs baseline: evo's best 0.900x cublas on the gpu clock: cublas runs" in text
    module = _module(text, tmp_path)
    assert module.USES["32x64x64:fp32"][0] == "evo" and module.USES["16x64x64:fp32"][0] == "baseline"
    assert module.kernel_for((32, 64, 64), "fp32").__name__ == "matmul"
    baseline = module.kernel_for((16, 64, 64), "fp32")
    assert baseline.__name__ == "baseline_matmul"
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 64, generator=gen), torch.randn(64, 64, generator=gen)
    assert torch.equal(module.matmul(a, b), torch.matmul(a, b))  # the dispatcher runs torch's own op here
    out = torch.empty(16, 64)
    assert module.matmul(a, b, out=out) is out and torch.equal(out, torch.matmul(a, b))
    with pytest.warns(UserWarning, match=r"using the choice of 16x64x64:fp32 \(baseline\)"):
        assert module.kernel_for((12, 64, 64), "fp32").__name__ == "baseline_matmul"  # the nearest one's choice


def test_the_choice_rules():
    win, lose, untimed = row(WINS, 0.01, 0.02), row(WINS, 0.02, 0.02), row(WINS, 0.01, None)
    assert choose(win, smoke=False).use == "evo" and choose(win, smoke=False).ratio == pytest.approx(2.0)
    assert choose(lose, smoke=False).use == "baseline"  # a tie is no win: torch's op is the one to beat
    assert choose(untimed, smoke=False).use == "baseline" and "not timed" in choose(untimed, smoke=False).why
    assert choose(lose, smoke=False, has_baseline=False).use == "evo"  # nothing to fall back to, and it says so
    assert "no baseline code" in choose(lose, smoke=False, has_baseline=False).why
    smoke = choose(row(WINS, 0.01, 0.02, gpu="cpu-interpreter"), smoke=True)
    assert smoke.use == "evo" and smoke.ratio is None and "no win claimed" in smoke.why and "x cublas" not in smoke.why


def test_the_rmsnorm_and_attention_baselines_take_the_entry_s_options():
    rms = operators.get("rmsnorm")
    problem = rms.problem((4, 64), "fp32")
    ns: dict = {}
    exec(rms.selfcheck_source(problem), ns)  # noqa: S102 - the operator's own plain-torch code
    x, w = ns["selfcheck_inputs"]("cpu")
    assert not torch.allclose(ns["selfcheck_baseline"](x, w, eps=1.0), ns["selfcheck_baseline"](x, w))
    att = operators.get("attention+causal")
    problem = att.problem((1, 4, 2, 3, 8, 16), "fp16")
    ns = {}
    exec(att.selfcheck_source(problem), ns)  # noqa: S102
    q, k, v = (t.float() for t in ns["selfcheck_inputs"]("cpu"))
    assert not torch.allclose(ns["selfcheck_baseline"](q, k, v, scale=0.5), ns["selfcheck_baseline"](q, k, v))
