"""The GEMM contenders of `evo bench` on CPU: the tutorial kernel under the Triton interpreter (fp16, tiny
shapes with ragged edges), its autotuned form with a stand-in `do_bench` (the interpreter has no CUDA
events; the stand-in's numbers are not timings), and the Helion kernel when helion is importable."""

from __future__ import annotations

import pytest
import torch

from genomes.gemm import TUTORIAL_CONFIGS
from operators.gemm.baselines import gemm_contenders, tutorial_autotuned, tutorial_matmul


def _rel_err(out, a, b):
    ref = a.float() @ b.float()
    return float((out.float() - ref).norm() / ref.norm())


@pytest.fixture
def operands():
    g = torch.Generator().manual_seed(0)
    # no size is a multiple of the 32-wide tiles: wrapped rows/columns and the masked K tail are exercised
    return (torch.randn(40, 72, generator=g).to(torch.float16), torch.randn(72, 56, generator=g).to(torch.float16))


@pytest.mark.parametrize("group_m", [1, 2])
def test_tutorial_kernel_one_config(operands, group_m):
    a, b = operands
    c = tutorial_matmul(a, b, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=group_m)
    assert c.shape == (40, 56) and c.dtype == torch.float16
    assert _rel_err(c, a, b) < 2e-3


def test_tutorial_kernel_detects_a_wrong_operand(operands):
    a, b = operands
    c = tutorial_matmul(a, b, BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=1)
    assert _rel_err(c, a, b.roll(1, dims=0)) > 0.5  # the check above can fail


def test_tutorial_autotune_over_the_16_configs_picks_the_fastest(operands):
    a, b = operands
    calls = []
    winner = 6

    def stand_in_do_bench(kernel_call, quantiles=None):  # not a timing: config `winner` is declared fastest
        kernel_call()
        calls.append(len(calls))
        t = 1.0 if len(calls) - 1 == winner else 5.0
        return [t, t, t]

    matmul = tutorial_autotuned(do_bench=stand_in_do_bench)
    c = matmul(a, b)
    assert len(calls) == len(TUTORIAL_CONFIGS) == 16
    best = matmul.autotuner.best_config
    bm, bn, bk, gm, stages, warps = TUTORIAL_CONFIGS[winner]
    assert best.kwargs == {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": gm}
    assert (best.num_stages, best.num_warps) == (stages, warps)
    assert _rel_err(c, a, b) < 2e-3
    matmul(a, b)
    assert len(calls) == 16  # tuned once per (M, N, K)


def test_tutorial_rejects_mismatched_operands():
    with pytest.raises(ValueError, match="A\\[M, K\\]"):
        tutorial_matmul(torch.zeros(4, 5, dtype=torch.float16), torch.zeros(6, 4, dtype=torch.float16),
                        BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1)


def test_contender_names_and_order():
    assert [b.name for b in gemm_contenders()] == ["triton_tutorial", "torch_compile", "helion"]
    assert all(b.doc for b in gemm_contenders())


def test_helion_kernel_in_the_interpreter(operands):
    pytest.importorskip("helion")
    from operators.gemm.helion_baseline import make_helion_matmul

    a, b = operands
    matmul = make_helion_matmul(config={"block_sizes": [32, 32, 32]})
    assert _rel_err(matmul(a, b), a, b) < 2e-3
    with pytest.raises(ValueError, match="effort"):
        make_helion_matmul(effort="max")


def _fake_helion(monkeypatch, *, with_budget: bool):
    """A stand-in `helion` package whose kernel decorator records its settings (no autotuning happens)."""
    import dataclasses
    import sys
    import types

    fields = [("autotune_effort", str, "full")] + ([("autotune_budget_seconds", object, None)] if with_budget else [])
    helion = types.ModuleType("helion")
    helion.__version__ = "1.1.0" if with_budget else "1.0.0"
    helion.Settings = dataclasses.make_dataclass("Settings", fields)
    helion.kernel = lambda fn, **settings: types.SimpleNamespace(fn=fn, settings=settings)
    language = types.ModuleType("helion.language")
    helion.language = language
    monkeypatch.setitem(sys.modules, "helion", helion)
    monkeypatch.setitem(sys.modules, "helion.language", language)
    monkeypatch.delitem(sys.modules, "operators.gemm.helion_baseline", raising=False)


def test_helion_budget_reaches_the_autotuner(monkeypatch):
    from evo.problem import Problem
    from operators.gemm.baselines import gemm_tuners

    _fake_helion(monkeypatch, with_budget=True)
    names = [b.name for b in gemm_tuners("full", 90)]
    assert names == ["torch_compile", "helion_full"] and "stopped after 90 s" in gemm_tuners("full", 90)[1].doc
    kernel = gemm_tuners("full", 90)[1].make(Problem.make("gemm", ("M", "N", "K"), (8, 8, 8), "fp16"))
    assert kernel.settings["autotune_budget_seconds"] == 90 and kernel.settings["autotune_effort"] == "full"
    unbounded = gemm_tuners("full")[1].make(Problem.make("gemm", ("M", "N", "K"), (8, 8, 8), "fp16"))
    assert "autotune_budget_seconds" not in unbounded.settings


def test_helion_without_a_budget_setting_is_unavailable_with_reason(monkeypatch):
    from evo.problem import Problem
    from operators.gemm.baselines import ContenderUnavailable, gemm_tuners

    _fake_helion(monkeypatch, with_budget=False)
    helion = gemm_tuners("full", 90)[1]
    with pytest.raises(ContenderUnavailable, match=r"helion 1\.0\.0 cannot stop .* helion 1\.1\.0"):
        helion.make(Problem.make("gemm", ("M", "N", "K"), (8, 8, 8), "fp16"))
