"""`evo zoo` end to end on the CPU: plan the tiny model, search every operator with the smoke executor, collect one
module, load its roles as torch ops, patch them into the reference layer, and compare with the plain layer."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

from evo.surface.cli import main
from tests.fixtures.tiny_zoo import ARGS, CONTEXT, TINY


@pytest.fixture
def zoo(tiny_zoo):  # the session's one tiny zoo (tests/conftest.py): searched once for both of its test files
    return tiny_zoo


@pytest.mark.slow
def test_the_collected_module_serves_every_planned_role(zoo, capsys):
    import torch

    from evo.api import load_zoo
    from evo.zoo import layer_problems, load_model
    from evo.zoo.layer import DecoderLayer, LMHead
    from evo.zoo.patch import patch

    spec = load_model(TINY)
    ops = load_zoo(zoo)
    plan = [p for p in layer_problems(spec, [1, 4], "fp16", CONTEXT) if p.searchable]
    layer_roles = {p.role for p in plan if p.scope == "layer"}
    head_roles = {p.role for p in plan if p.scope == "model"}
    # the decode plan: the linear roles (norms fused) and rope_cache
    assert layer_roles == {"linear_qkv", "rope", "attention", "cache_attention", "linear_o_proj", "linear_gate_up",
                           "linear_down"}
    assert head_roles == {"linear_lm_head", "sampling_softmax"} and set(ops) == layer_roles | head_roles
    for tokens in (1, 4, 2):  # 2 was not measured: the nearest count's elites serve it, with a warning
        x = torch.randn(tokens, spec.hidden_size, generator=torch.Generator().manual_seed(tokens)).half()
        # weights large enough that the layer's output is not all residual (a wrong kernel must show); the cache's
        # room is the largest T planned, as the plan's rope_cache problems have it
        plain = DecoderLayer(spec, dtype=torch.float16, init_std=0.2, context=CONTEXT, max_tokens=4)
        patched = patch(DecoderLayer(spec, dtype=torch.float16, init_std=0.2, context=CONTEXT, max_tokens=4),
                        {r: ops[r] for r in layer_roles})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out, ref = patched(x).float(), plain(x).float()
        assert float((out - ref).norm() / ref.norm()) < 5e-3, tokens
        assert float((patched.kv_cache - plain.kv_cache).float().norm() / plain.kv_cache.float().norm()) < 5e-3
        assert any("no kernel was measured" in str(w.message) for w in caught) == (tokens == 2)
        head = patch(LMHead(spec, dtype=torch.float16, init_std=0.2), {r: ops[r] for r in head_roles})
        probs, probs_ref = head.probabilities(out.half()).float(), LMHead(spec, dtype=torch.float16,
                                                                         init_std=0.2).probabilities(out.half()).float()
        assert float((probs - probs_ref).norm() / probs_ref.norm()) < 5e-3


@pytest.mark.slow
def test_the_collected_module_self_checks_standalone(zoo):
    done = subprocess.run([sys.executable, str(zoo)], capture_output=True, text=True, timeout=600,
                          env={"TRITON_INTERPRET": "1", "PATH": "/usr/bin:/bin"}, cwd=zoo.parent)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.count("PASS") >= 7  # every measured problem's elite (at least one per operator)


def test_collect_before_any_run_is_one_line(tmp_path, capsys):
    assert main(["zoo", *ARGS, "--smoke", "-o", str(tmp_path)]) == 0
    capsys.readouterr()
    assert main(["zoo", *ARGS, "-o", str(tmp_path), "--collect"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no run under" in err[0] and "Traceback" not in err[0]


def test_the_module_header_says_what_runs_each_role_and_claims_no_smoke_win(zoo):
    head = zoo.read_text().split('"""')[1]
    assert "linear_qkv T=1 (linear+rmsnorm 1x128x64): evo: smoke run, nothing timed: no win claimed" in head
    assert "linear_lm_head T=4 (linear+rmsnorm 4x256x64): evo:" in head
    assert f"rope T=1 (rope_cache 1x4x2x16x{CONTEXT + 3}): evo:" in head  # the cache: context + 4, less T
    assert "x cublas" not in head and "runs baseline" not in head  # a smoke run's stand-in fitness beat nothing
