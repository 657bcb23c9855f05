"""The Gluon GEMM's launch plan (operators/gemm/gluon_plan.py, on host.py's checks) as its rendered modules run it:
on the CPU, where no Gluon kernel runs, its refusals, and the launches it makes on meta tensors (recorded, not run:
evo.evaluate.compiler.record_launches, as the compile step finds them)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import operators
from evo.evaluate.compiler import record_launches
from evo.problem import HOPPER
from genomes.gemm_gluon import GLUON_FIXED
from operators._paste import pasted_source
from operators.gemm import gluon_plan, host, padding, plan
from operators.gemm.host import CPU_NUM_SMS
from tests.operators.gemm.launches import load_jit


def _module(name: str, sizes: tuple[int, int, int], **values):
    op = operators.get(name)
    family = op.family
    g = family.make(family.base(**{**GLUON_FIXED, "backend": "gluon", **values}))
    problem = op.problem(sizes, "bf16")
    assert family.violations(g, problem, HOPPER) == [], family.violations(g, problem, HOPPER)
    return load_jit(op.render(g, problem, HOPPER))


def _launches(module, *args):
    return record_launches(module, module.matmul, args)


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_the_launcher_pastes_the_shared_host_code_and_the_gluon_plan_and_only_they_read_the_genome():
    module = _module("gemm", (1000, 3001, 588), BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3, pad_rows=True)
    source = Path(module.__file__).read_text()
    for pasted in (host, padding, gluon_plan):
        assert pasted_source(pasted.__file__) in source
    assert pasted_source(plan.__file__) not in source and "def gemm_plan(" not in source  # the Triton plan's own
    entry = source.split("\ndef matmul(")[1]
    assert "gluon_plan(a, b, None, None, None, out, CONFIG)" in entry and "BLOCK" not in entry
    assert module.CONFIG["PAD_ROWS"] and module.CONFIG["ROWS"] == 128 and not module.CONFIG["ROW_SPLIT"]


def test_bad_arguments_are_refused_in_one_line_naming_what_is_wrong():
    module = _module("gemm+bias+gelu", (1024, 1024, 512), BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4)
    a, b, bias = torch.ones(64, 64, dtype=torch.bfloat16), torch.ones(64, 128, dtype=torch.bfloat16), torch.ones(
        128, dtype=torch.bfloat16)
    refusals = [
        ((a.float(), b.float(), bias.float()), "A and B must share one dtype of fp16, bf16; got torch.float32"),
        ((a, b[:32], bias), r"inner dimensions differ: A is \(64, 64\), B is \(32, 128\)"),
        ((a, b, bias[:3]), "bias must be a contiguous vector of N=128"),
        ((a[:, :0], b[:0], bias), "K=0: the product is empty; a fused epilogue needs K > 0"),
        ((torch.ones(64, 63, dtype=torch.bfloat16), torch.ones(63, 128, dtype=torch.bfloat16), bias),
         "tensor descriptors need rows of 16-byte multiples; K=63, N=128"),
        ((torch.ones(64 * 64 + 1, dtype=torch.bfloat16)[1:].view(64, 64), b, bias),
         "tensor descriptors need A, B and out to start at 16-byte aligned addresses"),
    ]
    for args, message in refusals:
        with pytest.raises(ValueError, match=message):
            module.matmul(*args)
    with pytest.raises(ValueError, match="out must be a contiguous 64x128"):
        module.matmul(a, b, bias, out=torch.empty(3, 3, dtype=torch.bfloat16))
    assert module.matmul(a[:0], b, bias).shape == (0, 128)  # nothing to compute: no launch
    plain = _module("gemm", (1024, 1024, 512), BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4)
    out = torch.ones(64, 128, dtype=torch.bfloat16)
    assert plain.matmul(a[:, :0], b[:0], out=out) is out and not out.any()  # K=0 without an epilogue: zeros


def test_a_row_split_wide_tile_takes_descriptors_of_one_consumers_rows_and_both_column_blocks():
    module = _module("gemm+scale+bias+gelu+residual", (1024, 1024, 1024), BLOCK_M=192, BLOCK_N=192, num_warps=4,
                     num_stages=3, consumers=3, consumer_split="rows")
    M, N, K = 1000, 1024, 512
    (launch,) = _launches(module, _meta(M, K), _meta(K, N), _meta(N), _meta(M, N), 2)
    a, b, b1, c, c1, bias, residual, scale = launch.args[:8]
    assert [list(d.block_shape) for d in (a, b, b1, c, c1)] == [[64, 64], [64, 128], [64, 64], [64, 128], [64, 64]]
    assert [list(d.shape) for d in (a, b, b1, c, c1)] == [[M, K], [K, N], [K, N], [M, N], [M, N]]
    assert b.base is b1.base and c.base is c1.base and bias.shape == (N,) and residual.shape == (M, N)
    assert scale == 2.0 and isinstance(scale, float)  # a float on every call (an int 1 would compile as a constant)
    assert launch.args[8:] == (M, N, K, 192, 192, 64, 8, 3, 3, 4, 128, 64, 64)  # sizes, the blocks, ROWS
    assert launch.grid[0] == min(CPU_NUM_SMS, 6 * 6) and launch.kwargs == {"num_warps": 4}


def test_split_k_launches_the_partials_then_their_reduction_with_the_epilogue():
    module = _module("gemm+bias+gelu", (1024, 1024, 32768), BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4,
                     split_k=3)
    M, N, K = 1024, 1024, 32768
    gemm, reduce = _launches(module, _meta(M, K), _meta(K, N), _meta(N))
    partials = gemm.args[3]
    assert partials.shape == (3 * M, N) and partials.dtype == torch.float32
    assert gemm.args[4:] == (M, N, K, 128, 128, 64, 8, 4, 1, 8, 3) and gemm.grid[0] == CPU_NUM_SMS
    assert reduce.args[0] is partials and reduce.args[2].shape == (N,)  # the bias goes to the reduction only
    assert reduce.args[3:] == (M, N, 3, 32, module.REDUCE_C)  # 32 rows a program: 256 programs for 4 SMs
    assert reduce.grid[:2] == (M // 32, N // module.REDUCE_C)


def test_split_k_reduction_takes_fewer_rows_a_program_where_32_leave_sms_idle(monkeypatch):
    module = _module("gemm", (1024, 1024, 32768), BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4, split_k=3)
    monkeypatch.setattr(module, "num_sms", lambda device: 132)
    cpu = torch.device("cpu")
    assert module._reduce_rows(4096, 4096, cpu) == 32  # 4096 programs of 32 x 128
    assert module._reduce_rows(2048, 1024, cpu) == 16  # 32 rows: 512 programs, under 4 an SM; 16 rows: 1024
    assert module._reduce_rows(640, 384, cpu) == 8  # the long-K class: 240 programs, not 60


def test_padded_rows_are_copied_in_and_out_and_one_b_only_once():
    module = _module("gemm", (1000, 3001, 588), BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3, pad_rows=True)
    a, b = _meta(1000, 588), _meta(588, 3001)
    # two calls of one plan (recorded together: the plan binds the recorder its first call found)
    launches = record_launches(module, lambda: [module.matmul(a, b, out=_meta(1000, 3001)) for _ in range(2)], ())
    names = [launch.fn.__name__ for launch in launches]
    assert names[:4] == ["copy_rows_kernel", "copy_rows_kernel", "matmul_kernel", "copy_rows_kernel"]  # A, B, C out
    assert names[4:] == ["copy_rows_kernel", "matmul_kernel", "copy_rows_kernel"]  # the same B: its copy kept
    descriptors = launches[5].args[:3]
    assert [list(d.strides) for d in descriptors] == [[592, 1], [3008, 1], [3008, 1]]  # rows of 16-byte multiples
