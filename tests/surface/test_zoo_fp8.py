"""`evo zoo MODEL --dtype fp8 --run` on the CPU: the tiny model's FP8 zoo searched with the smoke executor, collected
into one module whose fp8_gemm+channel roles load as torch ops (evo.api.load_zoo), pick their elite by the output
dtype (the operands are e4m3) and self-check as a script in the Triton interpreter; --collect and --report again."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from evo.surface.cli import main
from tests.fixtures.tiny_fp8_zoo import ARGS, NAME


def _fp8_operands(tokens: int, n: int, k: int, seed: int):
    import torch

    from operators.fp8_gemm.quantize import quantize

    gen = torch.Generator().manual_seed(seed)
    a_q, a_scale = quantize(torch.randn(tokens, k, generator=gen), "row")
    w_q, w_scale = quantize(torch.randn(n, k, generator=gen) * k ** -0.5, "row")
    return a_q, w_q, a_scale, w_scale


@pytest.mark.slow
def test_the_fp8_zoo_serves_its_roles_as_torch_ops(tiny_fp8_zoo):
    import torch

    from evo.api import load_zoo
    from evo.zoo import layer_problems, load_model
    from evo.zoo.fp8_problems import FP8_OPERATOR, fp8_name
    from tests.fixtures.tiny_zoo import CONTEXT, TINY

    spec = fp8_name(load_model(TINY))
    ops = load_zoo(tiny_fp8_zoo)
    plan = {p.role: p for p in layer_problems(spec, [1, 4], "fp16", CONTEXT, weights="fp8") if p.searchable}
    assert set(ops) == set(plan)
    assert {"fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_down", "norm", "rope", "linear_lm_head"} <= set(ops)
    head = tiny_fp8_zoo.read_text().split('"""')[1]
    assert f"fp8_gate_up: {FP8_OPERATOR}" in head and f"fp8_down T=4 ({FP8_OPERATOR} 4x64x128): evo:" in head
    for role, tokens in (("fp8_qkv", 4), ("fp8_gate_up", 1), ("fp8_down", 4)):
        n, k = plan[role].sizes[1:]
        a, w, a_scale, w_scale = _fp8_operands(tokens, n, k, seed=tokens)
        y = ops[role](a, w, a_scale, w_scale, torch.float16)
        ref = (a.double() * a_scale.double()[:, None]) @ (w.double() * w_scale.double()[:, None]).t()
        assert y.dtype == torch.float16 and y.shape == (tokens, n)
        assert float((y.double() - ref).norm() / ref.norm()) < 3e-3, role
    # the elite is chosen by the output dtype: bf16 was not measured (a smoke zoo is fp16), one line says so
    with pytest.raises(ValueError, match="no kernel for dtype 'bf16'; measured: 1x"):
        ops["fp8_qkv"](*_fp8_operands(4, *plan["fp8_qkv"].sizes[1:], seed=0), torch.bfloat16)
    # an unmeasured token count: the nearest measured elite, with a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = ops["fp8_o_proj"](*_fp8_operands(2, *plan["fp8_o_proj"].sizes[1:], seed=2), torch.float16)
    assert y.shape == (2, spec.hidden_size) and any("no kernel was measured" in str(w.message) for w in caught)


@pytest.mark.slow
def test_the_fp8_module_self_checks_standalone(tiny_fp8_zoo):
    done = subprocess.run([sys.executable, str(tiny_fp8_zoo)], capture_output=True, text=True, timeout=600,
                          env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}, cwd=tiny_fp8_zoo.parent)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # 8 fp8_gemm+channel problems (4 projections at T = 1 and 4), each checked against its float64 reference
    assert sum("fp8_gemm+channel" in line and "PASS" in line for line in done.stdout.splitlines()) == 8


@pytest.mark.slow
def test_collect_and_report_again_find_the_fp8_runs(tiny_fp8_zoo, capsys):
    out = tiny_fp8_zoo.parents[1]
    before = tiny_fp8_zoo.read_text().split('"""')[1]  # the header: roles and what runs them (no export time)
    assert main(["zoo", *ARGS, "--smoke", "-o", str(out), "--collect"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {tiny_fp8_zoo}" in printed and "fp8_qkv" in printed and "not served" not in printed
    assert tiny_fp8_zoo.read_text().split('"""')[1] == before
    assert main(["zoo", *ARGS, "--smoke", "-o", str(out), "--report"]) == 0
    page = (out / NAME / "report.html").read_text()
    assert "fp8_gate_up" in page and "fp8_gemm+channel" in page
    assert "FP8 weights (e4m3, per-channel scales), fp16" in page


@pytest.mark.slow
def test_the_fp8_zoo_patched_into_the_fp8_layer(tiny_fp8_zoo):
    import torch

    from evo.api import load_zoo
    from evo.zoo import load_model
    from evo.zoo.layer_fp8 import FP8DecoderLayer
    from evo.zoo.patch import patch, roles_of
    from tests.fixtures.tiny_zoo import CONTEXT, TINY

    spec = load_model(TINY)
    ops = load_zoo(tiny_fp8_zoo)
    kwargs = dict(dtype=torch.float16, init_std=0.2, context=CONTEXT, max_tokens=4)
    layer_ops = {r: ops[r] for r in roles_of(FP8DecoderLayer(spec, **kwargs)) if r in ops}
    assert set(layer_ops) == {"norm", "fp8_qkv", "rope", "attention", "cache_attention", "fp8_o_proj", "fp8_gate_up",
                              "fp8_down"}
    for tokens in (1, 4):
        x = torch.randn(tokens, spec.hidden_size, generator=torch.Generator().manual_seed(tokens)).half()
        plain = FP8DecoderLayer(spec, **kwargs)
        patched = patch(FP8DecoderLayer(spec, **kwargs), layer_ops)
        out, ref = patched(x).float(), plain(x).float()
        assert float((out - ref).norm() / ref.norm()) < 5e-3, tokens
        assert float((patched.kv_cache - plain.kv_cache).float().norm() / plain.kv_cache.float().norm()) < 5e-3
    # torch.compile traces the patched FP8 layer whole (the zoo's ops are custom ops; the quantization is torch's)
    compiled = torch.compile(patched, backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        assert float((compiled(x).float() - ref).norm() / ref.norm()) < 5e-3
