"""Compiling ahead on the CPU for sm_90: recording the launcher's launches, reading shared memory and
registers from the cubin, static rejections, and a compile child that survives compilers that die or hang."""

import os
from pathlib import Path

import pytest

from evo.evaluate import CompileChild, GpuBackend
from evo.evaluate.compiler import compile_candidate, jit_functions, record_launches
from evo.evaluate.modules import load_source
from evo.problem import HOPPER
from tests.fixtures.faulty_operator import FaultyOperator, candidate

OP = FaultyOperator()
_pretend_interpreter_patch = eval("lambda *args, **kwargs: None", {"__name__": "triton.runtime.interpreter"})


@pytest.fixture
def real_jit(monkeypatch, tmp_path):
    """Modules loaded inside the test get real JITFunctions (the suite runs the interpreter otherwise)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    yield tmp_path / "triton-cache"


def test_record_launches_sees_what_the_launcher_launches(real_jit):
    cand = candidate("none", n=1000, block=256, num_warps=2)
    module = load_source(cand.source)
    assert set(jit_functions(module)) == {"faulty_kernel"}
    launches = record_launches(module, module.faulty, OP.make_inputs(cand.problem, 0, device="meta"))
    assert len(launches) == 1
    launch = launches[0]
    assert launch.grid == (4,) and launch.kwargs == {"BLOCK": 256, "num_warps": 2}
    assert launch.args[3] == 1000 and launch.args[0].device.type == "meta"
    assert module.faulty_kernel is launch.fn  # the real kernel is back in place


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """Compiles in a fresh process: this test process has run the interpreter, which patches triton.language
    for the rest of the process's life, so it could not compile for a GPU itself."""
    cache = tmp_path_factory.mktemp("triton-cache")
    with CompileChild(GpuBackend(cache_dir=str(cache)), target=HOPPER, timeout_s=60) as p:
        yield p, cache


@pytest.mark.slow
def test_compile_for_sm90_on_cpu_reads_resources(pool, monkeypatch):
    p, cache = pool
    result = p.compile(candidate("none", n=4096))
    assert result.status == "ok", result.reason
    assert result.target == HOPPER and result.compile_s > 0
    kernel = result.resources["kernels"][0]
    assert kernel["name"] == "faulty_kernel" and kernel["num_warps"] == 4
    assert 0 < result.resources["registers"] <= 255 and result.resources["shared"] == 0
    assert result.resources["spills"] == 0
    # compiling runs niced: the GPU workers and the driver come first for a CPU
    assert os.getpriority(os.PRIO_PROCESS, int(result.worker.removeprefix("pid"))) >= 10
    # the cache entry is named by the hash the GPU's launch computes for the same specialisation
    assert len(result.cache_hashes) == 1
    from triton.runtime.cache import get_cache_manager

    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    entry = Path(get_cache_manager(result.cache_hashes[0]).cache_dir)
    assert entry.parent == Path(cache)
    assert any(f.suffix == ".cubin" for f in entry.iterdir())


@pytest.mark.slow
def test_compile_errors_are_results(pool):
    p, _ = pool
    for fault in ("compile", "syntax", "raise"):
        result = p.compile(candidate(fault))
        assert result.status == "compile_error", (fault, result.status)
        assert result.reason
    assert "no_such_function" in p.compile(candidate("compile")).reason


def test_compiling_after_the_interpreter_ran_is_refused_clearly(monkeypatch):
    import triton.language as tl

    monkeypatch.setattr(tl.core.tensor, "__mul__", _pretend_interpreter_patch, raising=True)
    result = compile_candidate(candidate("none", n=4096), HOPPER)
    assert result.status == "error" and "interpreter" in result.reason


@pytest.mark.slow
def test_pool_rejects_too_much_shared_memory(pool):
    p, _ = pool
    result = p.compile(candidate("smem"))
    assert result.status == "out_of_resources", result.reason
    assert result.resources["shared"] > HOPPER.smem_bytes and result.resources["registers"] > 0
    assert "shared memory" in result.reason


@pytest.mark.slow
def test_pool_survives_a_dying_compiler(pool):
    p, cache = pool
    restarts = p.restarts
    died, ok, error = (p.compile(c) for c in (candidate("launcher_exit"), candidate("none", n=2048),
                                             candidate("compile")))
    assert died.status == "compile_error" and "died" in died.reason and "exit code 7" in died.reason
    assert ok.status == "ok" and error.status == "compile_error"
    assert p.restarts == restarts + 1
    # same kernel, same specialisation, other process: the cache entry is found, not written again
    entries = set(os.listdir(cache))
    with CompileChild(GpuBackend(cache_dir=str(cache)), target=HOPPER, timeout_s=60) as other:
        again = other.compile(candidate("none", n=2048))
    assert again.cache_hashes == ok.cache_hashes and set(os.listdir(cache)) == entries


@pytest.mark.slow
def test_pool_kills_a_hanging_compile():
    with CompileChild(GpuBackend(), target=HOPPER, timeout_s=6) as p:
        hung = p.compile(candidate("launcher_sleep"))
        after = p.compile(candidate("compile"))
        assert hung.status == "timeout"
        assert after.status == "compile_error"
        assert p.restarts == 1


def test_pool_input_checks():
    with pytest.raises(ValueError):
        CompileChild(GpuBackend(), timeout_s=0)
