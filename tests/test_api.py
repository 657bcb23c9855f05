"""evo.api on the CPU (kernels in the interpreter): a rendered kernel as a torch op whose eager path is the kernel's
own launcher, whose fake implementation gives the right result shape, and which torch.compile traces with
fullgraph=True; loading from an exported module and from a run directory. GPU: tests/gpu/test_launch.py."""

from __future__ import annotations

import sys
import time

import pytest
import torch

import operators
from evo.api import LoadError, as_torch_op, load
from evo.evaluate.modules import load_source
from evo.problem import HOPPER

GEMM, RMSNORM = operators.get("gemm"), operators.get("rmsnorm")


def _gemm_module(tag: str = ""):
    problem = GEMM.problem((40, 24, 32), "fp32")
    genome = GEMM.family.make(GEMM.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    return load_source(GEMM.render(genome, problem, HOPPER) + f"\n# {tag}\n"), problem


def test_eager_calls_the_launcher_itself_and_the_op_is_registered():
    module, problem = _gemm_module("eager")
    mm = as_torch_op(module.matmul, GEMM, tag="api_eager")
    assert mm.entry is module.matmul and mm.op is not None
    assert as_torch_op(module.matmul, GEMM, tag="api_eager") is mm  # registered once per name
    a, b = GEMM.make_inputs(problem, 1, device="cpu")
    assert torch.equal(mm(a, b), module.matmul(a, b))
    assert torch.allclose(mm.op(a, b), a @ b, atol=1e-4)  # through the dispatcher


def test_the_fake_implementation_gives_the_result_shape():
    from torch._subclasses.fake_tensor import FakeTensorMode

    module, _ = _gemm_module("fake")
    mm = as_torch_op(module.matmul, GEMM, tag="api_fake")
    with FakeTensorMode():
        out = mm.op(torch.empty(7, 5), torch.empty(5, 3))
    assert tuple(out.shape) == (7, 3) and out.dtype == torch.float32


def test_torch_compile_traces_it_with_no_graph_break():
    module, problem = _gemm_module("compile")
    mm = as_torch_op(module.matmul, GEMM, tag="api_compile")

    def layer(a, b):
        return torch.relu(mm(a, b)) * 2

    a, b = GEMM.make_inputs(problem, 2, device="cpu")
    compiled = torch.compile(layer, fullgraph=True, backend="eager")  # fullgraph: a graph break raises
    assert torch.allclose(compiled(a, b), layer(a, b))


def test_an_operator_whose_scalars_follow_out_is_called_by_keyword():
    problem = RMSNORM.problem((6, 40), "fp32")
    module = load_source(RMSNORM.render(RMSNORM.family.make(RMSNORM.family.base()), problem, HOPPER))
    norm = as_torch_op(module.rmsnorm, RMSNORM, tag="api_rmsnorm")
    x, w = RMSNORM.make_inputs(problem, 3, device="cpu")
    for eps in (1e-6, 0.5):
        assert torch.allclose(norm(x, w, eps), module.rmsnorm(x, w, eps=eps), atol=1e-6)
    assert torch.allclose(norm.op(x, w, 0.5), module.rmsnorm(x, w, eps=0.5), atol=1e-6)
    assert not torch.allclose(norm(x, w, 0.5), norm(x, w))


def test_load_refuses_what_it_cannot_load(tmp_path):
    with pytest.raises(LoadError, match="no such file or run directory"):
        load(tmp_path / "missing.py")
    (tmp_path / "plain.py").write_text("x = 1\n")
    with pytest.raises(LoadError, match="not a module written by `evo export`"):
        load(tmp_path / "plain.py")
    with pytest.raises(LoadError, match="not a run directory"):
        load(tmp_path)
    with pytest.raises(LoadError, match="shape and dtype choose an elite of a run directory"):
        load(tmp_path / "plain.py", shape="4x4x4")


HEADER = "# evo elite kernel: gemm 8x8x8 fp32 (M=8, N=8, K=8)\n"


def _ran(tmp_path) -> str:
    """A line of code that leaves a mark when it runs."""
    return f"open({str(tmp_path / 'ran')!r}, 'w').close()\n"


@pytest.mark.parametrize("loader", ["load", "load_zoo"])
def test_a_file_that_is_not_an_export_is_refused_without_running_it(tmp_path, loader):
    import evo.api

    for name, text in (("side_effect.py", _ran(tmp_path)), ("exits.py", "import sys\nsys.exit(3)\n"),
                       ("forged.py", _ran(tmp_path) + "_EVO_OPERATOR = 'gemm'\nROLES = {'qkv': 'gemm'}\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(LoadError, match="not a module written by .*nothing of it was run"):
            getattr(evo.api, loader)(tmp_path / name)
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("body, why", [
    ("def broken(:\n", "not valid Python"),
    ("_EVO_OPERATOR = 'no_such_operator'\n", "unknown operator 'no_such_operator'"),
    ("x = 1\n", "names no _EVO_OPERATOR"),
])
def test_an_export_that_cannot_be_one_is_refused_before_it_runs(tmp_path, body, why):
    (tmp_path / "k.py").write_text(HEADER + _ran(tmp_path) + body)
    with pytest.raises(LoadError, match=why) as info:
        load(tmp_path / "k.py")
    assert "\n" not in str(info.value) and not (tmp_path / "ran").exists()


@pytest.mark.parametrize("body, why", [
    ("import sys\nsys.exit(5)\n", r"called sys.exit\(5\)"),
    ("raise RuntimeError('boom')\n", "importing it failed .RuntimeError: boom"),
    ("", r"defines no matmul\(\)"),
])
def test_an_export_whose_import_fails_is_a_load_error_never_the_callers_exit(tmp_path, body, why):
    (tmp_path / "k.py").write_text(HEADER + "_EVO_OPERATOR = 'gemm'\n" + body)
    with pytest.raises(LoadError, match=why):
        load(tmp_path / "k.py")


def test_load_refuses_a_huge_file_by_size_before_reading_it(tmp_path):
    from evo.api import MAX_MODULE_BYTES

    huge = tmp_path / "huge.py"
    with open(huge, "wb") as f:  # sparse: its size without the disk space
        f.truncate(MAX_MODULE_BYTES + 1)
    start = time.perf_counter()
    with pytest.raises(LoadError, match="huge.py: is larger than 65536 KiB") as refused:
        load(huge)
    assert time.perf_counter() - start < 0.5 and "\n" not in str(refused.value)  # not read: one line, at once


FAST = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)  # the fixture run's elites: one program per 64x64 tile


@pytest.fixture(scope="module")
def gemm_run(tmp_path_factory):
    from tests.fixtures.run_fixture import make_run

    return make_run(tmp_path_factory.mktemp("runs"), shapes=("64x64x64", "48x80x64"), dtype="fp32", fast_elite=FAST)


def test_load_an_elite_from_a_run_directory_and_from_its_exported_module(gemm_run, tmp_path):
    from evo.store.sqlite import Store
    from evo.surface.export import export_one

    mm = load(gemm_run, shape="48x80x64")
    a, b = torch.randn(48, 64), torch.randn(64, 80)
    assert mm.operator == "gemm" and torch.allclose(mm(a, b), a @ b, atol=1e-4)
    with Store(gemm_run / "store.sqlite", readonly=True) as store:
        (tmp_path / "k.py").write_text(export_one(store, (48, 80, 64))[0])
    assert load(tmp_path / "k.py") is mm  # the same source is one op, registered once
    with pytest.raises(LoadError, match="no measured kernel for shape 1x2x3"):
        load(gemm_run, shape="1x2x3")


def test_a_run_directory_without_a_shape_loads_every_elite_behind_one_dispatch(gemm_run):
    mm = load(gemm_run)
    for m, n, k in ((64, 64, 64), (48, 80, 64)):
        a, b = torch.randn(m, k), torch.randn(k, n)
        assert torch.allclose(mm(a, b), a @ b, atol=1e-4)
    module = sys.modules[mm.entry.__module__]
    assert len(module._EVO_CHOSEN) == 2  # chosen once per input shapes and dtype, then a dictionary look-up
    out = torch.empty(64, 64)
    assert mm.entry(torch.randn(64, 64), torch.randn(64, 64), out=out) is out  # the entry's own options pass on


def test_the_op_takes_out_as_the_entry_does():
    # issue 41: README promotes out=, and the loaded op refused it
    module, problem = _gemm_module("out")
    mm = as_torch_op(module.matmul, GEMM, tag="api_out")
    a, b = GEMM.make_inputs(problem, 4, device="cpu")
    out = torch.full((a.shape[0], b.shape[1]), float("nan"))
    assert mm(a, b, out=out) is out and torch.allclose(out, a @ b, atol=1e-4)

    def layer(a, b, out):
        return mm(a, b, out=out) * 1

    into = torch.full_like(out, float("nan"))
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(a, b, into), a @ b, atol=1e-4) and torch.allclose(into, a @ b, atol=1e-4)
    norm = as_torch_op(load_source(RMSNORM.render(RMSNORM.family.make(RMSNORM.family.base()),
                                                  RMSNORM.problem((6, 40), "fp32"), HOPPER)).rmsnorm,
                       RMSNORM, tag="api_out_rmsnorm")
    x, w = RMSNORM.make_inputs(RMSNORM.problem((6, 40), "fp32"), 3, device="cpu")
    y = torch.empty_like(x)
    assert norm(x, w, 0.5, out=y) is y and torch.allclose(y, norm(x, w, 0.5), atol=1e-6)
