"""The one launcher on a GPU (evo/launch/runtime.py): the bound launch computes bit for bit what Triton's JIT
path computes, allocates nothing when given `out`, is captured by CUDA graphs, and a kernel loaded as a torch
op compiles with fullgraph=True and runs under reduce-overhead. `python tests/gpu/test_launch.py` also prints
host microseconds per call against torch.matmul and the JIT path."""

from __future__ import annotations

import importlib.util
import itertools
import sys

import pytest
import torch

import operators
from evo.evaluate.clocks import host_us
from evo.evaluate.modules import write_source
from evo.problem import HOPPER, Target

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

GEMM = operators.get("gemm")
FAMILY = GEMM.family
BASE = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=8, num_stages=3, GROUP_M=8)
VARIANTS = {
    "pointer": {},
    "descriptor": dict(memory="descriptor"),
    "host_descriptor_persistent": dict(memory="host_descriptor", persistent=True),
    "host_descriptor_subtile": dict(memory="host_descriptor", epilogue_subtile=True),
    "split_k": dict(split_k=4),
    "stream_k": dict(persistent=True, stream_k=True),
    "pad_rows": dict(memory="host_descriptor", pad_rows=True),
}
SHAPES = {"aligned": (512, 384, 256), "ragged": (300, 250, 130)}
_fresh = itertools.count()


def _target() -> Target:
    return HOPPER  # sm_90 (H100 and H200 alike); nothing here may touch CUDA while tests are collected


def fresh_module(source: str):
    """A new module object for `source` (its own plan cache and BoundKernel class)."""
    path = write_source(source)
    spec = importlib.util.spec_from_file_location(f"evo_launch_test_{next(_fresh)}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def cases():
    for (vname, values), (sname, shape) in itertools.product(VARIANTS.items(), SHAPES.items()):
        genome = FAMILY.make(FAMILY.base(**{**BASE, **values}))
        problem = GEMM.problem(shape, "bf16")
        if not FAMILY.violations(genome, problem, _target()):
            yield pytest.param(genome, problem, id=f"{vname}-{sname}")


def _plan_of(module):
    (run,) = module._PLANS.values()
    return run


@pytest.mark.parametrize("genome,problem", list(cases()))
def test_bound_launch_equals_the_jit_path_bit_for_bit(genome, problem):
    source = GEMM.render(genome, problem, _target())
    bound, jit = fresh_module(source), fresh_module(source)
    jit.BoundKernel.jit_only = True
    a, b = GEMM.make_inputs(problem, 1)
    first = bound.matmul(a, b)  # through the JIT: compiles and binds
    second = bound.matmul(a, b)  # through the compiled kernel's own launcher
    assert _plan_of(bound).kernel.bound, "the second call should skip the JIT"
    reference = jit.matmul(a, b)
    assert not _plan_of(jit).kernel.bound
    torch.cuda.synchronize()
    assert torch.equal(second, reference) and torch.equal(first, reference)
    assert (second.float() - GEMM.reference(a, b)).norm() / GEMM.reference(a, b).norm() < GEMM.tolerance(problem)
    # new inputs at new addresses (the descriptor cache must follow them)
    a2, b2 = GEMM.make_inputs(problem, 2)
    assert torch.equal(bound.matmul(a2, b2), jit.matmul(a2, b2))


@pytest.mark.parametrize("genome,problem", list(cases()))
def test_a_call_with_out_allocates_nothing(genome, problem):
    module = fresh_module(GEMM.render(genome, problem, _target()))
    a, b = GEMM.make_inputs(problem, 3)
    out = torch.empty((problem.dims["M"], problem.dims["N"]), device="cuda", dtype=a.dtype)
    for _ in range(3):
        module.matmul(a, b, out=out)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(20):
        module.matmul(a, b, out=out)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before


@pytest.mark.parametrize("genome,problem", list(cases()))
def test_cuda_graph_captures_and_replays_the_launch(genome, problem):
    module = fresh_module(GEMM.render(genome, problem, _target()))
    a, b = GEMM.make_inputs(problem, 4)
    out = torch.empty((problem.dims["M"], problem.dims["N"]), device="cuda", dtype=a.dtype)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        module.matmul(a, b, out=out)
        module.matmul(a, b, out=out)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module.matmul(a, b, out=out)
    a2, b2 = GEMM.make_inputs(problem, 5)
    a.copy_(a2)
    b.copy_(b2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, module.matmul(a2, b2))


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_loaded_op_compiles_fullgraph(mode):
    from evo.api import as_torch_op

    problem = GEMM.problem((256, 512, 128), "bf16")
    genome = FAMILY.make(FAMILY.base(**{**BASE, "memory": "host_descriptor", "persistent": True}))
    source = GEMM.render(genome, problem, _target())
    op = as_torch_op(fresh_module(source).matmul, GEMM, tag=f"test_{mode.replace('-', '_')}")

    def layer(x, w):
        return torch.relu(op(x, w)) + 1

    compiled = torch.compile(layer, fullgraph=True, mode=mode)
    a, b = GEMM.make_inputs(problem, 6)
    expected = layer(a, b)
    for _ in range(3):  # reduce-overhead records the graph on a later call
        got = compiled(a, b)
    torch.cuda.synchronize()
    assert torch.equal(got, expected)


def _host_table() -> list[dict]:
    rows = []
    for shape in ((16, 4096, 4096), (1000, 3000, 2000), (777, 1234, 4320), (4096, 4096, 4096)):
        problem = GEMM.problem(shape, "bf16")
        a, b = GEMM.make_inputs(problem, 7)
        for vname, values in VARIANTS.items():
            genome = FAMILY.make(FAMILY.base(**{**BASE, **values}))
            if FAMILY.violations(genome, problem, _target()):
                continue
            source = GEMM.render(genome, problem, _target())
            bound, jit = fresh_module(source), fresh_module(source)
            jit.BoundKernel.jit_only = True
            fns = [lambda a=a, b=b: torch.matmul(a, b), lambda m=bound, a=a, b=b: m.matmul(a, b),
                   lambda m=jit, a=a, b=b: m.matmul(a, b)]
            torch_us, evo_us, jit_us = host_us(fns, reps=50)
            rows.append({"shape": "x".join(map(str, shape)), "variant": vname, "torch_matmul_us": torch_us,
                         "evo_bound_us": evo_us, "evo_jit_us": jit_us})
    return rows


if __name__ == "__main__":
    import json
    import os

    table = _host_table()
    print(f"{'shape':>16} {'variant':>28} {'torch.matmul':>12} {'evo bound':>10} {'evo JIT':>8}  (host us per call)")
    for r in table:
        print(f"{r['shape']:>16} {r['variant']:>28} {r['torch_matmul_us']:12.1f} {r['evo_bound_us']:10.1f} "
              f"{r['evo_jit_us']:8.1f}")
    if os.environ.get("EVO_OUT"):
        with open(os.path.join(os.environ["EVO_OUT"], "launch-host.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "rows": table}, f, indent=1)
