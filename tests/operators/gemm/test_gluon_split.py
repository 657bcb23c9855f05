"""The Gluon GEMM's stream-K (operators/gemm/gluon_split.py) on the CPU: the work every program takes (its helpers,
the file's pasted text, run as Python over every program of a grid), where the schedule is valid, and what its
rendering holds. The interpreter runs no Gluon: tests/gpu/test_gemm_stream_k_gpu.py checks the kernels' results on
a GPU."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

import operators
from evo.evaluate.compiler import record_launches
from evo.problem import HOPPER
from genomes.gemm_gluon import GLUON_FIXED
from operators._paste import pasted_source
from operators.gemm.gluon_plan import gluon_stream_k
from operators.gemm.gluon_source import SPLIT_FILE
from operators.gemm.host import CPU_NUM_SMS, SK_MAX_PARTS
from tests.operators.gemm.launches import load_jit

OP = operators.get("gemm")
FAMILY = OP.family
SHAPE = OP.problem((777, 4096, 4096), "bf16")


def gluon(**values):
    return FAMILY.make(FAMILY.base(**{**GLUON_FIXED, "backend": "gluon", "stream_k": True, **values}))


def _helpers(program: list[int], programs: int) -> dict:
    """The pasted helpers as Python: gl's scalar functions over ints, program_id the value in `program`."""
    gl = types.SimpleNamespace(minimum=min, maximum=max, cdiv=lambda a, b: -(-a // b), constexpr=int,
                               program_id=lambda axis: program[0], num_programs=lambda axis: programs,
                               thread_barrier=lambda: None)
    jit = types.SimpleNamespace(jit=lambda fn: fn)
    scope = {"gluon": jit, "triton": jit, "gl": gl, "tl": types.SimpleNamespace(constexpr=int)}
    exec(pasted_source(SPLIT_FILE), scope)
    return scope


def _plan(num_tiles: int, k_tiles: int, programs: int, consumers: int = 1) -> dict:
    """The launcher's stream-K plan (operators/gemm/gluon_plan.py) for a grid of `programs` (tiles of one row, one K
    step per BLOCK_K)."""
    config = {"BLOCK_M": 1, "BLOCK_N": 1, "BLOCK_K": 1, "CONSUMERS": consumers}
    names = ("sk_share", "sk_slots", "partials", "counters")
    return dict(zip(names, gluon_stream_k(1, num_tiles, k_tiles, programs, torch.device("cpu"), config), strict=True))


@pytest.mark.parametrize("num_tiles, k_tiles, programs", [
    (112, 64, 132),   # 777x4096x4096 in 128x256 tiles: under one wave, every tile shared
    (153, 64, 132),   # 1152x4352x4096: one whole wave, 21 tiles shared
    (36, 768, 132),   # 768x768x49152 in 128x128 tiles: long K, several runs per tile
    (4, 256, 132),    # a few tiles, K runs capped at SK_MAX_PARTS per tile
    (512, 64, 132), (264, 64, 132), (133, 5, 132), (7, 3, 4), (1, 1, 4),
])
def test_every_k_step_of_every_tile_is_taken_once_and_the_runs_share_the_work_evenly(num_tiles, k_tiles, programs):
    plan = _plan(num_tiles, k_tiles, programs)
    share, slots = plan["sk_share"], plan["sk_slots"]
    program = [0]
    h = _helpers(program, programs)
    covered: dict[int, list[tuple[int, int, int]]] = {t: [] for t in range(num_tiles)}
    work = []
    for p in range(programs):
        program[0] = p
        works, dp_tiles, run_lo, run_hi = h["stream_k_runs"](num_tiles, k_tiles, share)
        step = 0
        for w in range(works):
            tile, k_lo, k_hi, first_step = h["stream_k_item"](w, dp_tiles, run_lo, run_hi, k_tiles)
            assert 0 <= k_lo < k_hi <= k_tiles and first_step == step  # the ring's numbering in every role
            step += k_hi - k_lo
            covered[tile].append((k_lo, k_hi, p))
        work.append(step)
    assert dp_tiles == num_tiles - num_tiles % programs
    for tile, runs in covered.items():
        runs.sort()
        assert [r[0] for r in runs] == [0] + [r[1] for r in runs[:-1]] and runs[-1][1] == k_tiles, (tile, runs)
        if len(runs) > 1 or tile >= dp_tiles and runs[0][:2] != (0, k_tiles):
            first, parts = h["stream_k_parts"](tile - dp_tiles, k_tiles, share)
            assert [r[2] for r in runs] == list(range(first, first + parts)) and parts <= slots
            assert parts <= SK_MAX_PARTS + 1
    whole_waves = dp_tiles // programs * k_tiles
    assert max(work) - whole_waves <= share and min(work) >= whole_waves  # no program does more than one run


def test_the_plan_counts_one_arrival_counter_per_consumer_of_every_shared_tile():
    plan = _plan(num_tiles=112, k_tiles=64, programs=132, consumers=2)
    assert plan["sk_share"] == 55 and plan["sk_slots"] == 3
    assert plan["counters"].numel() == 112 * 2 and not plan["counters"].any()
    assert plan["partials"].numel() == 112 * 3 and plan["partials"].dtype == torch.float32


def test_stream_k_is_one_consumer_or_a_row_split_and_not_split_k():
    for values in (dict(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3),
                   dict(BLOCK_M=128, BLOCK_N=256, num_warps=4, num_stages=3, consumers=2, consumer_split="rows")):
        assert FAMILY.violations(gluon(**values), SHAPE, HOPPER) == []
    ping_pong = gluon(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=4, consumers=2)
    assert any("ping-pong" in r for r in FAMILY.violations(ping_pong, SHAPE, HOPPER))
    split = gluon(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4, split_k=3)
    assert any("split-K" in r for r in FAMILY.violations(split, SHAPE, HOPPER))
    rng = np.random.default_rng(0)
    for g in (ping_pong, split):
        fixed = FAMILY.repair(g, SHAPE, HOPPER, rng)
        assert fixed["backend"] == "gluon" and not fixed["stream_k"] and FAMILY.violations(fixed, SHAPE, HOPPER) == []
    rows = gluon(BLOCK_M=128, BLOCK_N=256, num_warps=4, num_stages=3, consumers=2, consumer_split="rows")
    assert FAMILY.repair(rows, SHAPE, HOPPER, rng) == rows
    assert FAMILY.descriptors()["structure"].fn(rows, {}) == 11.0


@pytest.mark.parametrize("name, values", [
    ("gemm", dict(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3)),
    ("gemm+bias+gelu", dict(BLOCK_M=128, BLOCK_N=256, num_warps=4, num_stages=3, consumers=2,
                            consumer_split="rows")),
])
def test_the_rendering_walks_the_runs_in_every_role_and_stores_a_shared_tile_once(name, values):
    op = operators.get(name)
    source = op.render(gluon(**values), SHAPE, HOPPER)
    compile(source, "gluon_stream_k.py", "exec")
    assert source.count("= stream_k_runs(") == 2  # the producer's and the consumers' partition
    consumer = source.split("def mma_partition(")[1].split("\n\n\n")[0]
    assert consumer.count("= stream_k_fixup(acc, partials, counters") == 1
    # the shared tile's fix-up first, then the store (with the epilogue) only in the run that stores
    assert consumer.index("stream_k_fixup(") < consumer.index("if store:") < consumer.index("apply_epilogue(") \
        < consumer.index("store_block(acc, c_smem, c_desc")
    entry = " ".join(source.split("def matmul_kernel(")[1].split("\n\n\n")[0].split())
    assert "partials, counters, sk_share, sk_slots" in entry and "STREAM_K=True" in entry
    assert ("BIAS=True" in entry and 'ACTIVATION="gelu"' in entry) == (name != "gemm")
    assert ("ROW_SPLIT=True" in entry) == ("consumer_split" in values)
    # the launch (recorded on meta tensors): a program per SM, the plan's workspace and shares after the sizes
    module = load_jit(source)
    g = gluon(**values)
    (launch,) = record_launches(module, module.matmul, tuple(op.make_inputs(SHAPE, 0, device="meta")))
    rows = "consumer_split" in values
    partials, counters, share, slots = launch.args[len(launch.args) - 4 - rows:][:4]
    expected = _plan(num_tiles=7 * 16, k_tiles=4096 // g["BLOCK_K"], programs=CPU_NUM_SMS,
                     consumers=g["consumers"])  # 777x4096 in 128x256 tiles
    assert launch.grid[0] == CPU_NUM_SMS and (share, slots) == (expected["sk_share"], expected["sk_slots"])
    assert partials.numel() == expected["partials"].numel() * 128 * 256
    assert counters.numel() == expected["counters"].numel() and partials.dtype == torch.float32
    off = op.render(gluon(**values).replace(stream_k=False), SHAPE, HOPPER)
    assert "STREAM_K=False" in off and "sk_share" not in off.split("def matmul_kernel(")[1].split("\n\n\n")[0]


@pytest.mark.slow
def test_stream_k_kernels_compile_for_hopper(tmp_path):
    """One consumer, a row split with a fused epilogue, and padded rows compile for sm_90 with their fix-up's
    atomics (the GPU test runs them)."""
    from tests.operators.hopper_compile import compile_for_hopper

    coop = gluon(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3).as_dict()
    rows = gluon(BLOCK_M=128, BLOCK_N=256, num_warps=4, num_stages=3, consumers=2, consumer_split="rows").as_dict()
    cases = [("gemm", coop, SHAPE.sizes, "bf16"), ("gemm+bias+gelu", rows, SHAPE.sizes, "bf16"),
             ("gemm", {**coop, "pad_rows": True}, (1000, 3001, 588), "bf16")]
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    assert all(r["status"] == "ok" for r in results), results
    ptx = "".join(p.read_text() for p in (tmp_path / "cache").rglob("matmul_kernel.ptx"))
    assert "atom.global.gpu.acq_rel.add" in ptx and "ld.global.cg" in ptx
