"""The launch runtime (evo/launch/runtime.py) on the CPU: what it keys plans on, its plan cache, and that without a
compiled kernel to bind (the interpreter) every call still runs through Triton's JIT. Its GPU side (bound launches
bit for bit with the JIT, no allocation, CUDA graphs) is tests/gpu/test_launch.py."""

from __future__ import annotations

import ast

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.launch import runtime_source
from evo.launch.runtime import PlanCache, signature
from evo.problem import HOPPER

GEMM = operators.get("gemm")


def test_runtime_source_is_pasted_without_its_imports_and_imports_only_torch_and_triton():
    text = runtime_source()
    assert "import torch\n" not in text and "import triton\n" not in text and "class BoundKernel" in text
    tree = ast.parse(text)
    top = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    top |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m.split(".")[0] for m in top} <= {"triton", "types", "re"}, top


def test_signature_keys_on_shape_strides_dtype_device_and_alignment():
    base = torch.zeros(64, dtype=torch.float16)
    a, b = base[:32].view(4, 8), base[8:40].view(4, 8)  # 16 bytes apart: both aligned
    odd = base[1:33].view(4, 8)  # 2 bytes off
    assert signature(a) == signature(b)
    assert signature(a) != signature(odd) and signature(odd)[-1] == 2 and signature(a)[-1] == 0
    assert signature(a) != signature(a.t()) and signature(a) != signature(a.float())
    assert signature("not a tensor") is None and signature(None) is None


def test_plan_cache_clears_past_its_limit():
    cache = PlanCache(limit=3)
    for i in range(3):
        cache.add(i, str(i))
    assert len(cache) == 3
    assert cache.add(99, "new") == "new" and list(cache) == [99]


def test_under_the_interpreter_every_call_goes_through_the_jit():
    problem = GEMM.problem((40, 24, 32), "fp32")
    genome = GEMM.family.make(GEMM.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    module = load_source(GEMM.render(genome, problem, HOPPER))
    a, b = GEMM.make_inputs(problem, 0, device="cpu")
    first, second = module.matmul(a, b), module.matmul(a, b)
    (run,) = [r for k, r in module._PLANS.items() if k[0] == signature(a)]
    assert type(run.kernel).__name__ == "BoundKernel" and not run.kernel.bound  # the module's own copy
    assert torch.equal(first, second)
    assert torch.allclose(first, a @ b, atol=1e-4)


def test_a_plan_is_made_once_per_signature_and_bad_arguments_make_none():
    problem = GEMM.problem((40, 24, 32), "fp32")
    genome = GEMM.family.make(GEMM.family.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    module = load_source(GEMM.render(genome, problem, HOPPER) + "\n# plan count test\n")
    a, b = GEMM.make_inputs(problem, 0, device="cpu")
    module.matmul(a, b)
    module.matmul(a.clone(), b.clone())
    assert len(module._PLANS) == 1
    out = torch.empty(40, 24)
    assert module.matmul(a, b, out=out) is out and len(module._PLANS) == 2  # out's signature is part of the key
    for bad in ((a, b[:-1]), (a.half(), b), ("a", b)):
        with pytest.raises(ValueError):
            module.matmul(*bad)
    with pytest.raises(ValueError, match="out must be a contiguous 40x24"):
        module.matmul(a, b, out=torch.empty(24, 40).t())
    assert len(module._PLANS) == 2


def test_a_bound_launch_expands_descriptors_once_per_address(monkeypatch):
    """The bound path on the CPU, its GPU pieces stood in for: the launcher gets the grid, the current stream, the
    fixed head and the arguments with each descriptor position expanded, encoded once per base address."""
    from evo.launch import runtime

    launched, encoded = [], []
    kernel = runtime.BoundKernel(lambda: None, (3,), {}, descriptors={1: ([4, 8], [8, 1], [2, 8])})
    kernel.device, kernel._tried = 0, True
    kernel._raw = (lambda *args: launched.append(args), ("fn", "head"))
    kernel._encode = [(1, ([4, 8], [8, 1], [2, 8]), None, {})]
    monkeypatch.setattr(runtime, "_host_descriptor", lambda t, spec: (t, *spec))

    def make_desc(desc, meta):
        encoded.append(desc)
        return ["map", *desc[1], *desc[2]]

    kernel._make_desc = make_desc
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 77, raising=False)
    a, b = torch.zeros(4, 8), torch.zeros(4, 8)
    kernel("x", a, 5)
    kernel("y", a, 6)
    kernel("z", b, 7)
    assert launched[0] == (3, 1, 1, 77, "fn", "head", "x", "map", 4, 8, 8, 1, 5)
    assert launched[1][-1] == 6 and len(encoded) == 2  # a's descriptor encoded once, b's once


def test_host_descriptors_of_tl_and_gluon_kernels():
    """A (shape, strides, block) spec makes tl's host descriptor; one with a shared layout makes Gluon's, which
    carries the layout into the kernel (its NVMMA swizzle)."""
    pytest.importorskip("triton.experimental.gluon")
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor
    from triton.tools.tensor_descriptor import TensorDescriptor

    from evo.launch import runtime

    t = torch.zeros(64, 128, dtype=torch.float16)
    plain = runtime._host_descriptor(t, ([64, 128], [128, 1], [16, 64]))
    assert type(plain) is TensorDescriptor and list(plain.block_shape) == [16, 64]
    layout = gl.NVMMASharedLayout.get_default_for([16, 64], gl.float16)
    gluon = runtime._host_descriptor(t, ([64, 128], [128, 1], [16, 64], layout))
    assert type(gluon) is GluonDescriptor and gluon.layout == layout and list(gluon.block_shape) == [16, 64]
