"""The Triton GEMM's rendering: a header (the genome's CONFIG and the entry) above operators/gemm/kernel.py and
operators/gemm/plan.py pasted verbatim; each gene reaches the code only as a CONFIG entry (a constexpr switch of the
kernel or a launch option of the plan), and the plan's grid and workspace follow the structure genes."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch

import operators
from evo.problem import HOPPER
from operators._paste import pasted_source
from operators.gemm import host, kernel, padding, plan
from operators.gemm.source import KERNEL_FILE, PLAN_FILE

OP = operators.get("gemm")
FAMILY = OP.family
PROBLEM = OP.problem((256, 256, 512), "fp16")  # aligned and large enough for every feature
PLAIN = dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=1, loop_stages=0, loop_unroll=1)
GEMM = Path(kernel.__file__).parent


def src(problem=PROBLEM, **values) -> str:
    return OP.render(FAMILY.make(FAMILY.base(**{**PLAIN, **values})), problem, HOPPER)


def config(problem=PROBLEM, **values) -> dict:
    namespace: dict = {}
    exec(compile(src(problem, **values), "<gemm>", "exec"), namespace)
    return namespace["CONFIG"]


def test_the_module_is_the_header_then_the_kernel_and_the_plan_verbatim():
    for values in (dict(), dict(memory="host_descriptor", pad_rows=True)):
        s = src(OP.problem((256, 250, 500), "fp16"), **values)
        ast.parse(s)
        kernel_at, plan_at = s.index(pasted_source(KERNEL_FILE)), s.index(pasted_source(PLAN_FILE))
        assert kernel_at < s.index(pasted_source(host.__file__)) < plan_at  # the checks both GEMM launchers share
        assert (pasted_source(padding.__file__) in s) == bool(values)  # the padding copies only where rows are padded
        assert s.index("CONFIG = {") < s.index("def matmul(a, b, out=None):") < kernel_at


def test_the_plan_passes_every_constexpr_the_kernel_declares_in_its_order():
    params = inspect.signature(kernel.matmul_kernel.fn).parameters.values()
    declared = tuple(p.name for p in params if p.annotation in (kernel.tl.constexpr, "tl.constexpr"))
    assert declared == plan.CONSTEXPRS
    assert set(plan.CONSTEXPRS) | {"NUM_WARPS", "NUM_STAGES", "PAD_ROWS"} == set(config())


@pytest.mark.parametrize("values, expected", [
    (dict(), dict(MEMORY="pointer", PERSISTENT=False, STREAM_K=False, SPLIT_K=1, SUBTILE=False, WIDE=False,
                  BLOCK_N0=64, BLOCK_N1=0, GROUP_M=1, COLUMN_MAJOR=False, LOOP_STAGES=None, LOOP_UNROLL=None,
                  WARP_SPECIALIZE=False, ROW_ALIGN=1, ALIGN_K=False, ALIGN_N=False, ACTIVATION="", SCALE=False)),
    (dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=16, num_warps=8, num_stages=5),
     dict(BLOCK_M=128, BLOCK_N=32, BLOCK_K=16, NUM_WARPS=8, NUM_STAGES=5)),
    (dict(GROUP_M=8, raster="col"), dict(GROUP_M=8, COLUMN_MAJOR=True)),
    (dict(loop_stages=3, loop_unroll=2), dict(LOOP_STAGES=3, LOOP_UNROLL=2)),
    (dict(memory="descriptor", warp_specialize=True, num_warps=4, loop_stages=2),
     dict(MEMORY="descriptor", WARP_SPECIALIZE=True, LOOP_STAGES=2)),
    (dict(persistent=True), dict(PERSISTENT=True, STREAM_K=False)),
    (dict(persistent=True, stream_k=True), dict(PERSISTENT=True, STREAM_K=True)),
    (dict(split_k=4), dict(SPLIT_K=4, PERSISTENT=False)),
    (dict(memory="host_descriptor", epilogue_subtile=True), dict(MEMORY="host_descriptor", SUBTILE=True)),
    (dict(BLOCK_N=192), dict(WIDE=True, BLOCK_N0=128, BLOCK_N1=64)),
    (dict(BLOCK_N=96), dict(WIDE=True, BLOCK_N0=64, BLOCK_N1=32)),
])
def test_each_gene_sets_its_config_entry(values, expected):
    got = config(**values)
    assert {k: got[k] for k in expected} == expected


def test_pointer_kernels_state_row_alignment_that_triton_cannot_see():
    n_odd = config(OP.problem((1000, 3000, 2000), "bf16"), **FAMILY.base())  # N % 16 = 8, K % 16 = 0
    assert (n_odd["ROW_ALIGN"], n_odd["ALIGN_K"], n_odd["ALIGN_N"]) == (8, False, True)
    both = config(OP.problem((1000, 1004, 1000), "fp32"), **{**FAMILY.base(), "BLOCK_K": 32})
    assert (both["ROW_ALIGN"], both["ALIGN_K"], both["ALIGN_N"]) == (4, True, True)
    for shape in ((4096, 4096, 4096), (1000, 3001, 2001)):  # Triton sees the first; nothing to state for the second
        c = config(OP.problem(shape, "fp16"), **FAMILY.base())
        assert (c["ROW_ALIGN"], c["ALIGN_K"], c["ALIGN_N"]) == (1, False, False)
    desc = config(OP.problem((1000, 3000, 2000), "bf16"), **{**FAMILY.base(), "memory": "descriptor"})
    assert (desc["ROW_ALIGN"], desc["ALIGN_N"]) == (1, False)


def test_the_epilogue_sets_its_switches():
    op = operators.get("gemm+scale+bias+gelu+residual")
    namespace: dict = {}
    genome = op.family.make(op.family.base(**PLAIN))
    exec(op.render(genome, op.problem((256, 256, 512), "fp16"), HOPPER), namespace)
    c = namespace["CONFIG"]
    assert (c["SCALE"], c["BIAS"], c["ACTIVATION"], c["SWIGLU"], c["RESIDUAL"]) == (True, True, "gelu", False, True)
    assert namespace["matmul"].__code__.co_varnames[:6] == ("a", "b", "bias", "residual", "scale", "out")


# -- the launch plan (operators/gemm/plan.py), on the CPU -------------------------------------------------------
def _config(**values) -> dict:
    namespace: dict = {}
    exec(compile(src(**values), "<gemm>", "exec"), namespace)
    return namespace["CONFIG"]


@pytest.mark.parametrize("values, grid, workspace", [
    (dict(), (16,), False),  # 256 x 256 in 64 x 64 tiles
    (dict(persistent=True), (host.CPU_NUM_SMS,), False),
    (dict(split_k=4), (64,), True),
    (dict(persistent=True, stream_k=True), (host.CPU_NUM_SMS,), True),
])
def test_the_launch_plan_follows_the_structure(values, grid, workspace):
    p = plan.launch_plan(256, 256, 512, torch.device("cpu"), _config(**values))
    assert p.grid == grid and (p.partials is not None) == workspace
    if values.get("split_k"):
        assert p.counters.shape == (16,) and not p.counters.any() and p.partials.numel() == 16 * 4 * 64 * 64
    if values.get("persistent"):
        assert p.num_sms == host.CPU_NUM_SMS


@pytest.mark.parametrize("num_tiles, k_tiles, programs", [(112, 64, 132), (153, 64, 132), (36, 768, 132),
                                                          (4, 256, 132), (7, 3, 4), (1, 1, 4), (8, 5, 4)])
def test_stream_k_shares_cover_every_k_step_of_the_shared_tiles(num_tiles, k_tiles, programs):
    sk_tiles, share, slots = host.stream_k_shares(num_tiles, k_tiles, programs)
    assert sk_tiles == num_tiles % programs and share >= 1
    steps = sk_tiles * k_tiles
    assert share * programs >= steps  # every step taken
    assert -(-k_tiles // share) <= host.SK_MAX_PARTS + 1 and slots >= -(-k_tiles // share)


def test_host_descriptors_of_a_subtiled_swiglu_and_a_wide_tile():
    sub = _config(memory="host_descriptor", epilogue_subtile=True)
    specs = host._descriptor_specs(100, 200, 300, sub, (300, 200, 200))
    assert specs == {0: ([100, 300], [300, 1], [64, 32]), 1: ([300, 200], [200, 1], [32, 64]),
                     3: ([100, 200], [200, 1], [64, 32])}
    wide = _config(memory="host_descriptor", BLOCK_N=192)
    specs = host._descriptor_specs(100, 200, 300, wide, (300, 200, 200))
    assert specs[1][2] == [32, 128] and specs[2] == ([300, 200], [200, 1], [32, 64]) and specs[4][2] == [64, 64]
    swiglu = {**sub, "SWIGLU": True, "SUBTILE": False}
    assert host._descriptor_specs(100, 200, 300, swiglu, (300, 200, 200))[1] == ([300, 400], [400, 1], [32, 64])


def test_the_renderer_writes_text_by_template_only():
    """No search-and-replace on source text, no markers: the renderer's files call no str.replace."""
    for name in ("source.py", "header.py", "launcher.py", "plan.py", "kernel.py", "padding.py", "selfcheck.py"):
        text = (GEMM / name).read_text()
        assert not re.search(r"\.replace\(", text), name
    for values in (dict(), dict(split_k=4), dict(persistent=True, stream_k=True, memory="host_descriptor")):
        assert not re.search(r"EPILOGUE_|SWIGLU_SPLIT|EMPTY_K|\{\{|\{%", src(**values))
