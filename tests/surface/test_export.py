"""`evo export`: standalone modules that import only triton and torch, state how they were measured, and
check themselves against torch. Run directories come from tests/fixtures/run_fixture.py (made-up test rows)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evo.store.sqlite import Store
from evo.surface.cli import main
from evo.surface.export import ExportError, export_all, export_one, nearest_distance
from tests.fixtures.run_fixture import TEST_GPU, make_run
from tests.fixtures.toy_operator import register_toy

FAST = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "num_stages": 2, "GROUP_M": 1}


def _run_module(path: Path, *args: str, cwd: Path | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, env=env,
                          cwd=cwd or path.parent, timeout=timeout)


def _imports(text: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.fixture(scope="module")
def gemm_run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("runs"), shapes=("64x64x64", "48x80x64"), fast_elite=FAST)


@pytest.mark.slow
def test_export_gemm_runs_in_interpreter_and_matches_torch(gemm_run, tmp_path, capsys):
    out = tmp_path / "kernel.py"
    assert main(["export", str(gemm_run), "--shape", "64x64x64", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    assert _imports(text) - set(sys.stdlib_module_names) == {"triton", "torch"}
    # the header says how it was measured
    for words in (TEST_GPU, "Median time: 0.02 ms", "ratio 2.500x", "Baseline torch-test", "BLOCK_M=32",
                  "triton test", "gemm 64x64x64 fp16"):
        assert words in text, words
    result = _run_module(out)
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout and "relative error" in result.stdout


@pytest.mark.slow
def test_self_check_can_fail(gemm_run, tmp_path):
    """A module whose kernel disagrees with the reference must fail its self-check."""
    text, _ = export_one(Store(gemm_run / "store.sqlite"), (64, 64, 64), "fp16")
    broken = text.replace("def selfcheck_reference(", "def _true_reference(", 1)
    broken += "\n\ndef selfcheck_reference(*inputs):\n    return _true_reference(*inputs) * 1.5\n"
    broken = broken.replace('\nif __name__ == "__main__":\n    raise SystemExit(_evo_selfcheck())\n', "\n")
    broken += '\nif __name__ == "__main__":\n    raise SystemExit(_evo_selfcheck())\n'
    path = tmp_path / "broken.py"
    path.write_text(broken)
    result = _run_module(path)
    assert result.returncode == 1 and "FAIL" in result.stdout


def test_export_is_the_fastest_correct_kernel(gemm_run):
    with Store(gemm_run / "store.sqlite") as store:
        text, elite = export_one(store, (48, 80, 64))
        assert elite.evaluation.status == "ok"
        assert elite.evaluation.median_ms == min(ev.median_ms for ev in store.iter("gemm:48x80x64:fp16", "ok"))
        assert elite.problem.key == "gemm:48x80x64:fp16"


def test_unknown_shape_lists_the_measured_ones(gemm_run, tmp_path, capsys):
    assert main(["export", str(gemm_run), "--shape", "128x128x128", "-o", str(tmp_path / "k.py")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "64x64x64 fp16" in err and "48x80x64 fp16" in err
    assert not (tmp_path / "k.py").exists()
    with pytest.raises(ExportError, match="measured"):
        export_one(Store(gemm_run / "store.sqlite"), (64, 64, 64), "fp32")


@pytest.mark.parametrize("argv,words", [
    (["--shape", "64x64"], "no measured kernel"),
    (["--shape", "64xx64"], "--shape"),
    ([], "--shape SHAPE or --all"),
    (["--shape", "64x64x64", "--all"], "--shape SHAPE or --all"),
    (["--shape", "64x64x64", "--dtype", "fp8"], "--dtype"),
])
def test_export_bad_requests(gemm_run, tmp_path, capsys, argv, words):
    assert main(["export", str(gemm_run), *argv, "-o", str(tmp_path / "k.py")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_smoke_export_says_fitness_was_not_a_timing(tmp_path):
    run = make_run(tmp_path, name="smk", smoke=True, n_random=3, fast_elite=FAST)
    text, _ = export_one(Store(run / "store.sqlite"), (64, 64, 64))
    header = text.split("import os", 1)[0]
    assert "NOT a timing" in header and "smoke" in header
    assert "Median time" not in header and "ratio" not in header


@pytest.mark.slow
def test_bf16_self_check_is_not_run_on_the_interpreter(tmp_path):
    run = make_run(tmp_path, name="b16", dtype="bf16", n_random=3, fast_elite=FAST)
    text, _ = export_one(Store(run / "store.sqlite"), (64, 64, 64), "bf16")
    path = tmp_path / "k.py"
    path.write_text(text)
    result = _run_module(path)
    assert result.returncode == 77 and "NOT CHECKED" in result.stderr


@pytest.mark.slow
def test_all_dispatches_to_exact_and_nearest_shapes(tmp_path, monkeypatch):
    register_toy(monkeypatch)
    run = make_run(tmp_path, name="toyrun", operator="toy", shapes=("1000", "4096"), dtype="fp32",
                   descriptors=("block", "num_warps"), n_random=4)
    text, found = export_all(Store(run / "store.sqlite"))
    assert [e.problem.key for e in found] == ["toy:1000:fp32", "toy:4096:fp32"]
    assert _imports(text) - set(sys.stdlib_module_names) == {"torch"}  # triton comes in with each elite
    path = tmp_path / "toy_all.py"
    path.write_text(text)
    result = _run_module(path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("PASS") == 2
    probe = (
        "import warnings, torch, toy_all as m\n"
        "print(m.nearest((1000,), 'fp32'), m.nearest((3000,), 'fp32'), m.nearest((1500,), 'fp32'))\n"
        "x = torch.randn(3000)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    y = m.toy(x)\n"
        "    m.toy(torch.randn(3001))  # another unmeasured shape served by the same elite: no second warning\n"
        "print(bool(torch.allclose(y, 2 * x + 1)), len(w), 'neither timed nor checked' in str(w[0].message))\n"
        "try:\n    m.kernel_for((1000,), 'fp16')\nexcept ValueError as e:\n    print('error', e)\n"
    )
    env = dict(os.environ, TRITON_INTERPRET="1", EVO_KERNEL_DIR=str(tmp_path / "cache"))
    env.pop("PYTHONPATH", None)
    probe_result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                                  env=env, timeout=240)
    assert probe_result.returncode == 0, probe_result.stderr
    lines = probe_result.stdout.splitlines()
    assert lines[0] == "1000:fp32 4096:fp32 1000:fp32"  # |log2| distance: 1500 is nearer 1000 than 4096
    assert lines[1] == "True 1 True"
    assert lines[2].startswith("error no kernel for dtype 'fp16'")


def test_nearest_distance_is_symmetric_log_distance():
    assert nearest_distance((1024, 16), (2048, 16)) == 1.0
    assert nearest_distance((2048, 16), (1024, 16)) == 1.0
    assert nearest_distance((16, 4096, 4096), (16, 4096, 4096)) == 0.0


def _operator_names():
    import operators

    return operators.names()


@pytest.mark.parametrize("name", _operator_names())
def test_every_operator_offers_a_self_check(name):
    """Exports are operator-agnostic only if each operator supplies its plain-torch self-check snippet."""
    import operators

    op = operators.get(name)
    problem = op.problem(tuple([64] * len(op.dims)), "fp16")
    code = op.selfcheck_source(problem)
    assert code, f"operator {name} offers no selfcheck_source (see operators/base.py)"
    namespace: dict = {}
    exec(compile(code, f"<{name} selfcheck>", "exec"), namespace)  # plain torch: runs without triton
    inputs = namespace["selfcheck_inputs"]("cpu")
    assert tuple(namespace["problem_sizes"](*inputs)) == problem.sizes
    ref = namespace["selfcheck_reference"](*inputs)
    base = namespace["selfcheck_baseline"](*inputs)
    err = ((base.float() - ref.float()).norm() / ref.float().norm()).item()
    assert err <= namespace["SELFCHECK_TOLERANCE"], name


# -- the clocks a caller sees: header, _evo_measure, self-check ----------------------------------------------
def _elite_with_clocks(gemm_run, objective: str = "call"):
    """The fixture's elite with made-up caller clocks (TEST DATA): call 0.03 ms against a baseline's 0.06 ms,
    host 12 us against 8 us; its GPU ratio stays the fixture's 0.05 / 0.02 = 2.5."""
    from evo.surface.export import best_kernels

    with Store(gemm_run / "store.sqlite") as store:
        elite = next(e for e in best_kernels(store) if e.problem.sizes == (64, 64, 64))
        meta = store.all_meta()
    ev = elite.evaluation
    ev.call_ms, ev.baseline_call_ms, ev.host_us, ev.baseline_host_us, ev.objective = 0.03, 0.06, 12.0, 8.0, objective
    return elite, meta


def _load(text: str, path: Path):
    import importlib.util

    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"exported_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_header_shows_both_clocks_and_the_objective(gemm_run):
    import operators
    from evo.surface.export import render_module

    elite, meta = _elite_with_clocks(gemm_run)
    text = render_module(operators.get("gemm"), elite, meta)
    header = text.split("import os", 1)[0]
    # the GPU ratio is named as such even when the run ranked by the call clock (Evaluation.ratio follows the objective)
    assert "Baseline torch-test: 0.05 ms" in header and "ratio 2.500x" in header
    assert "Call clock (back-to-back eager calls, host launch cost included): 0.03 ms per call, baseline 0.06 ms: " \
           "ratio 2.000x." in header
    assert "Host time of one call: 12 us (baseline 8 us)." in header
    assert "Objective: call: the search ranked kernels by the call clock" in header
    assert "_EVO_HEADER_GPU_RATIO = 2.5\n" in text and "_EVO_HEADER_CALL_RATIO = 2.0\n" in text
    assert "_EVO_OBJECTIVE = 'call'\n" in text
    plain = export_one(Store(gemm_run / "store.sqlite"), (64, 64, 64))[0].split("import os", 1)[0]
    assert "Call clock" not in plain and "Objective: gpu: the search ranked kernels by GPU time" in plain


def test_evo_measure_reports_both_ratios_against_the_header(gemm_run, tmp_path):
    """_evo_measure with stand-in timers patched into the loaded module (made-up figures, not timings)."""
    import operators
    from evo.surface.export import render_module

    elite, meta = _elite_with_clocks(gemm_run)
    module = _load(render_module(operators.get("gemm"), elite, meta), tmp_path / "clocked.py")
    module._evo_gpu_ms = lambda fns, device: [0.02, 0.05]  # ratio 2.5: as the header
    module._evo_call_ms = lambda fns, device: [0.03, 0.036]  # ratio 1.2 against the header's 2.0
    module._evo_host_us = lambda fns, device: [11.0, 7.0]
    m = module._evo_measure("cpu")
    assert set(m) == {"gpu_ms", "base_gpu_ms", "gpu_ratio", "call_ms", "base_call_ms", "call_ratio", "host_us",
                      "base_host_us", "header_gpu_ratio", "header_call_ratio", "objective"}
    assert m["gpu_ratio"] == pytest.approx(2.5) and m["call_ratio"] == pytest.approx(1.2)
    assert (m["header_gpu_ratio"], m["header_call_ratio"], m["objective"]) == (2.5, 2.0, "call")
    versions = {"torch": "test", "triton": "test"}
    same = module._evo_report(m, TEST_GPU, versions)
    assert "ratio 2.500x; agrees with the header's 2.500x within 5% (+0.0%)" in same[0]
    assert "ratio 1.200x; differs by 40% from the header's 2.000x: same GPU model and versions" in same[1]
    assert "host time of one call: kernel 11.0 us, baseline 7.0 us" == same[2]
    assert "objective of the run: call (the search ranked kernels by call clock)" == same[3]
    assert module._evo_report(m, TEST_GPU, {"torch": "test+cu130", "triton": "test"}) == same  # local part ignored
    other = module._evo_report(m, "NVIDIA H100", {"torch": "2.13", "triton": "test"})
    assert f"differs by 40% from the header's 2.000x: the header was measured on {TEST_GPU}, this is NVIDIA H100; " \
           "torch test there, 2.13 here" in other[1]
    own = _load(render_module(operators.get("gemm"), elite, meta), tmp_path / "own.py")
    with pytest.raises(ValueError, match="CUDA"):  # the module's own GPU timer, unpatched, needs CUDA
        own._evo_measure("cpu")


def test_module_call_clock_and_host_time_follow_the_calls(gemm_run, tmp_path, monkeypatch):
    """The module's eager clocks on CPU callables (no GPU to wait for: its synchronisation is stubbed out)."""
    import time

    module = _load(export_one(Store(gemm_run / "store.sqlite"), (64, 64, 64))[0], tmp_path / "eager.py")
    monkeypatch.setattr(module, "_evo_sync", lambda device: None)
    calls = {"fast": 0, "slow": 0}

    def fast():
        calls["fast"] += 1

    def slow():
        calls["slow"] += 1
        time.sleep(0.002)

    fast_ms, slow_ms = module._evo_call_ms([fast, slow], "cpu", rounds=3)
    assert slow_ms >= 1.9 and fast_ms < 0.5
    # 3 warm-up + 1 sizing call, then rounds of 5 ms worth within [2, 200] calls: as the search's clocks
    assert calls["slow"] == 4 + 3 * 2 and 4 + 3 * 8 < calls["fast"] <= 4 + 3 * 200
    calls.update(fast=0, slow=0)
    fast_us, slow_us = module._evo_host_us([fast, slow], "cpu", reps=5)
    assert slow_us >= 1900 and fast_us < 500
    assert calls["slow"] == 4 + 5 * 2 and calls["fast"] == 4 + 5 * 8  # bursts of 5 ms at most, 8 calls at most


@pytest.mark.gpu
def test_module_measures_itself_on_cuda(gemm_run, tmp_path):
    """On a GPU: _evo_measure gives positive times on every clock, and the self-check prints both ratios beside
    the header's (the fixture's header was not measured on this GPU, so they differ and say why)."""
    text, _ = export_one(Store(gemm_run / "store.sqlite"), (64, 64, 64))
    path = tmp_path / "cuda_kernel.py"
    module = _load(text, path)
    m = module._evo_measure()
    assert all(m[k] > 0 for k in ("gpu_ms", "base_gpu_ms", "call_ms", "base_call_ms", "host_us", "base_host_us"))
    assert m["call_ms"] >= m["gpu_ms"] * 0.5  # a call costs at least about its GPU work
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("TRITON_INTERPRET", None)
    result = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    assert "PASS" in result.stdout and "GPU time (L2 flushed" in result.stdout and "call clock" in result.stdout
    assert "agrees with the header" in result.stdout or "the header was measured on TEST DATA" in result.stdout
