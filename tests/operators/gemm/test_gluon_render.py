"""The Gluon backend of the GEMM genome on the CPU: where it is valid, how repair moves into it and out, that
genes added later leave stored genomes' identities alone, what the rendering holds, and that every seed
compiles for sm_90 through the product's own ahead-of-time compile (the interpreter runs no Gluon; the GPU
sample, tests/gpu/test_gemm_sample.py, checks their results)."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest

import operators
from evo.problem import HOPPER, INTERPRETED_HOPPER, Target
from genomes.gemm_gluon import GLUON_FIXED, gluon_smem
from operators._paste import pasted_source
from operators.gemm.gluon_source import KERNEL_FILE, SPLIT_FILE
from tests.operators.hopper_compile import compile_for_hopper

OP = operators.get("gemm")
FAMILY = OP.family
SQUARE = OP.problem((4096, 4096, 4096), "bf16")


def gluon(**values):
    return FAMILY.make(FAMILY.base(**{**GLUON_FIXED, "backend": "gluon", **values}))


def entry(source: str) -> str:
    """The rendered matmul_kernel (its words one space apart): the launcher's parameters, one call of the pasted
    gemm_kernel."""
    return " ".join(source.split("def matmul_kernel(")[1].split("\n\n\n")[0].split())


def test_gluon_is_valid_on_hopper_for_fp16_and_bf16_with_aligned_rows_only():
    g = gluon(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3)
    assert FAMILY.violations(g, SQUARE, HOPPER) == []
    assert FAMILY.violations(g, OP.problem((4096, 4096, 4096), "fp16"), HOPPER) == []
    assert any("fp32" in r for r in FAMILY.violations(g, OP.problem((4096, 4096, 4096), "fp32"), HOPPER))
    ampere = Target(name="a100", arch=80, num_sms=108, smem_bytes=166912)
    assert any("sm_80" in r for r in FAMILY.violations(g, SQUARE, ampere))
    assert any("16-byte" in r for r in FAMILY.violations(g, OP.problem((4096, 4095, 4096), "bf16"), HOPPER))
    assert any("holds persistent=True" in r for r in FAMILY.violations(g.replace(persistent=False), SQUARE, HOPPER))
    assert FAMILY.violations(g.replace(BLOCK_N=192, num_stages=4), SQUARE, HOPPER) == []  # two column blocks
    # two column blocks take split-K in Gluon (each block stores its partial), not in the Triton kernel
    assert FAMILY.violations(g.replace(BLOCK_N=192, num_stages=4, split_k=3), SQUARE, HOPPER) == []
    triton_wide = FAMILY.make(FAMILY.base(BLOCK_N=192, split_k=3))
    assert any("split-K" in r for r in FAMILY.violations(triton_wide, SQUARE, HOPPER))
    assert any("num_warps=4" in r for r in FAMILY.violations(g.replace(consumers=2), SQUARE, HOPPER))
    assert FAMILY.violations(g.replace(consumers=2, num_warps=4, BLOCK_N=128, num_stages=4), SQUARE, HOPPER) == []
    assert any("shared memory" in r for r in FAMILY.violations(g.replace(num_stages=5), SQUARE, HOPPER))
    assert any("Gluon rendering" in r for r in FAMILY.violations(FAMILY.make(FAMILY.base(consumers=2)), SQUARE,
                                                                 HOPPER))
    assert operators.get("gemm+bias+gelu+residual").family.violations(g, SQUARE, HOPPER) == []
    assert any("interpreter" in r for r in FAMILY.violations(g, SQUARE, INTERPRETED_HOPPER))
    small = OP.problem((64, 64, 64), "fp16")  # the smoke run's: its target is the interpreter's
    assert any(s["backend"] == "gluon" for s in FAMILY.seeds(small, HOPPER))
    assert not any(s["backend"] == "gluon" for s in FAMILY.seeds(small, INTERPRETED_HOPPER))
    swiglu = operators.get("gemm+swiglu")
    assert any("SwiGLU" in r for r in swiglu.family.violations(g, SQUARE, HOPPER))


def test_repair_moves_a_genome_into_the_gluon_region_or_back_to_triton():
    rng = np.random.default_rng(0)
    raw = FAMILY.make(FAMILY.base(backend="gluon", BLOCK_M=32, BLOCK_N=192, num_warps=2, split_k=4, consumers=2))
    fixed = FAMILY.repair(raw, SQUARE, HOPPER, rng)
    assert fixed["backend"] == "gluon" and fixed["consumers"] == 2 and fixed["num_warps"] == 4
    assert all(fixed[k] == v for k, v in GLUON_FIXED.items()) and fixed["BLOCK_M"] >= 64
    assert FAMILY.violations(fixed, SQUARE, HOPPER) == [] and fixed["BLOCK_N"] in (128, 192)
    for problem in (OP.problem((4096, 4096, 4096), "fp32"), OP.problem((16, 4096, 4096), "bf16")):
        back = FAMILY.repair(raw, problem, HOPPER, rng)
        assert back["backend"] == "triton" and back["consumers"] == 1
    for _ in range(200):  # random genomes repaired for the square are valid, and half of them are Gluon's
        g = FAMILY.random(rng, SQUARE, HOPPER)
        assert FAMILY.violations(g, SQUARE, HOPPER) == []
    seeds = FAMILY.seeds(SQUARE, HOPPER)
    assert {(g["consumers"], g["num_warps"]) for g in seeds if g["backend"] == "gluon"} == {(1, 8), (2, 4), (1, 4),
                                                                                          (3, 4)}
    assert {g["consumer_split"] for g in seeds if g["consumers"] == 3} == {"rows"}


def test_genes_added_later_keep_stored_genomes_and_their_hashes():
    triton = FAMILY.make(FAMILY.base())
    genes = json.loads(triton.canonical())["genes"]
    assert "backend" not in genes and "consumers" not in genes  # encoded as before the genes existed
    stored = json.dumps({"family": "gemm", "genes": genes})
    assert FAMILY.from_canonical(stored) == triton and FAMILY.from_canonical(stored).hash == triton.hash
    g = gluon(consumers=2)
    assert json.loads(g.canonical())["genes"]["backend"] == "gluon" and FAMILY.from_canonical(g.canonical()) == g
    assert FAMILY.complete({"BLOCK_M": 64})["consumers"] == 1


def test_the_structure_cell_names_the_gluon_schedule():
    structure = FAMILY.descriptors()["structure"]
    assert structure.fn(gluon(num_warps=8), {}) == 8.0 and structure.fn(gluon(consumers=2), {}) == 9.0
    assert structure.fn(gluon(BLOCK_M=192, num_warps=4, consumers=3, consumer_split="rows"), {}) == 10.0
    assert structure.fn(FAMILY.complete(json.loads(FAMILY.make(FAMILY.base()).canonical())["genes"]), {}) == 0.0


@pytest.mark.parametrize("consumers, warps", [(1, 8), (2, 4)])
def test_the_rendering_holds_the_roles_its_genome_names(consumers, warps):
    g = gluon(BLOCK_M=128, BLOCK_N=128, num_warps=warps, num_stages=4, consumers=consumers)
    source = OP.render(g, SQUARE, HOPPER)
    compile(source, "gluon_gemm.py", "exec")
    kernel, split = pasted_source(KERNEL_FILE), pasted_source(SPLIT_FILE)
    assert split + "\n\n" + kernel in source  # the kernel files verbatim, whatever the genome
    assert source.count("\n@gluon.jit") == kernel.count("@gluon.jit") + split.count("@gluon.jit") + 1
    assert f"'CONSUMERS': {consumers}," in source and f"'NUM_WARPS': {warps}," in source
    call = entry(source)
    assert "gemm_kernel(a_desc, b_desc, None, c_desc, None, None, None, None, None, None, M, N, K, None, None" in call
    assert "ROW_SPLIT=False, SPLIT_K=1, STREAM_K=False, SCALE=False, BIAS=False, ACTIVATION=None" in call
    assert "\n@triton.jit\ndef split_k_reduce" not in source  # no second launch without split-K


def test_a_fused_epilogue_is_applied_to_each_consumers_accumulator():
    op = operators.get("gemm+scale+bias+gelu_tanh+residual")
    source = op.render(gluon(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=4, consumers=2), SQUARE, HOPPER)
    compile(source, "gluon_gemm_epilogue.py", "exec")
    assert "def matmul(a, b, bias, residual, scale, out=None):" in source
    assert "gluon_plan(a, b, bias, residual, scale, out, CONFIG)" in source  # test_gluon_plan.py: its launch
    call = entry(source)
    assert call.startswith("a_desc, b_desc, c_desc, bias_ptr, residual_ptr, scale, M, N, K,")
    assert "gemm_kernel(a_desc, b_desc, None, c_desc, None, bias_ptr, residual_ptr, scale, None, None," in call
    assert 'SCALE=True, BIAS=True, ACTIVATION="gelu_tanh", RESIDUAL=True' in call


def test_row_split_consumers_are_valid_only_as_64_rows_each_and_repair_keeps_them_so():
    rows = gluon(BLOCK_M=192, BLOCK_N=192, num_warps=4, num_stages=3, consumers=3, consumer_split="rows")
    assert FAMILY.violations(rows, SQUARE, HOPPER) == []
    assert any("needs ~" in r for r in FAMILY.violations(rows.replace(num_stages=4), SQUARE, HOPPER))
    assert any("64 rows each" in r for r in FAMILY.violations(rows.replace(BLOCK_M=256), SQUARE, HOPPER))
    assert any("split a tile's rows" in r for r in FAMILY.violations(rows.replace(consumer_split="tiles"), SQUARE,
                                                                       HOPPER))
    assert any("BLOCK_M=192 is three Gluon consumers" in r
               for r in FAMILY.violations(FAMILY.make(FAMILY.base(BLOCK_M=192)), SQUARE, HOPPER))
    rng = np.random.default_rng(1)
    moved = FAMILY.repair(rows.replace(BLOCK_M=128, consumers=3), SQUARE, HOPPER, rng)  # a BLOCK_M mutation
    assert (moved["BLOCK_M"], moved["consumers"], moved["consumer_split"]) == (128, 2, "rows")
    to_192 = FAMILY.repair(gluon(BLOCK_M=192, BLOCK_N=192, num_warps=8, num_stages=4), SQUARE, HOPPER, rng)
    assert (to_192["consumers"], to_192["num_warps"], to_192["consumer_split"]) == (3, 4, "rows")
    assert FAMILY.violations(to_192, SQUARE, HOPPER) == [] and to_192["num_stages"] == 3  # 4 stages overflow
    triton = FAMILY.repair(FAMILY.make(FAMILY.base(BLOCK_M=192)), SQUARE, HOPPER, rng)
    assert triton["backend"] == "triton" and triton["BLOCK_M"] == 128


def test_row_split_consumers_each_take_their_rows_of_every_tile():
    op = operators.get("gemm+bias+relu+residual")
    g = gluon(BLOCK_M=192, BLOCK_N=192, num_warps=4, num_stages=3, consumers=3, consumer_split="rows")
    source = op.render(g, SQUARE, HOPPER)
    compile(source, "gluon_gemm_rows.py", "exec")
    assert "'ROWS': 64," in source and "'CONSUMERS': 3," in source
    call = entry(source)
    assert "BLOCK_N1: gl.constexpr, ROWS: gl.constexpr):" in call and "ROW_SPLIT=True" in call
    assert 'BIAS=True, ACTIVATION="relu", RESIDUAL=True' in call
    assert "'ROW_SPLIT': True," in source  # the launch: test_gluon_plan.py
    plain = OP.render(gluon(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=4, consumers=2), SQUARE, HOPPER)
    assert "'ROW_SPLIT': False," in plain and "ROW_SPLIT=False" in entry(plain)  # ping-pong


def test_a_wide_tile_is_two_column_blocks_each_with_its_wgmma_store_and_epilogue():
    op = operators.get("gemm+bias+relu")
    source = op.render(gluon(BLOCK_M=128, BLOCK_N=192, num_warps=8, num_stages=4), SQUARE, HOPPER)
    compile(source, "gluon_gemm_wide.py", "exec")
    assert "'BLOCK_N0': 128," in source and "'BLOCK_N1': 64," in source and "'WIDE': True," in source
    call = entry(source)
    assert call.startswith("a_desc, b_desc, b1_desc, c_desc, c1_desc, bias_ptr, M, N, K,")
    assert "gemm_kernel(a_desc, b_desc, b1_desc, c_desc, c1_desc, bias_ptr, None, None," in call
    assert "BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N0, BLOCK_N1, GROUP_M" in call
    plain = op.render(gluon(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4), SQUARE, HOPPER)
    assert "b1_desc" not in entry(plain) and "BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N, 0, GROUP_M" in entry(plain)


@pytest.mark.slow
def test_every_gluon_seed_compiles_for_hopper_within_its_shared_memory_estimate(tmp_path):
    # every seed bare and under every epilogue part at once (scale, bias, an activation, the residual): the epilogue
    # switches are independent constexprs, so a subset of them (gemm+residual, ...) compiles a subset of this code
    cases, estimates = [], []
    for name in ("gemm", "gemm+scale+bias+gelu_tanh+residual"):
        family = operators.get(name).family
        for g in (g for g in family.seeds(SQUARE, HOPPER) if g["backend"] == "gluon"):
            cases.append((name, g.as_dict(), SQUARE.sizes, "bf16"))
            estimates.append(gluon_smem(g.as_dict(), "bf16"))
    assert len(cases) == 24 and sum(c[1]["split_k"] > 1 for c in cases) == 4
    assert sum(c[1]["BLOCK_N"] == 192 for c in cases) == 8 and sum(c[1]["consumers"] == 3 for c in cases) == 2
    assert sum(c[1]["BLOCK_N"] == 320 for c in cases) == 2  # cuBLAS's 128x320 (256 + 64), split by rows
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    for estimate, r in zip(estimates, results, strict=True):
        assert r["status"] == "ok", (r["name"], r["genome"], r["reason"])
        assert abs(r["shared"] - estimate) <= 1024, (r["name"], r["genome"], r["shared"])


def test_split_k_renders_partials_and_a_reducing_launch_that_sums_them_with_the_epilogue():
    """The Gluon kernel runs on GPUs only; the reduction is `tl` and runs in the interpreter: its sum of the
    partials and its epilogue are checked here against torch."""
    import torch

    from evo.evaluate.modules import load_source

    op = operators.get("gemm+bias+gelu")
    problem = op.problem((1024, 1024, 32768), "bf16")
    g = gluon(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=4, split_k=3)
    assert op.family.violations(g, problem, HOPPER) == []
    source = op.render(g, problem, HOPPER)
    call = entry(source)
    assert call.startswith("a_desc, b_desc, c_desc, partials, M, N, K,")
    assert call.endswith("SPLIT_K: gl.constexpr): \"\"\"The launcher's kernel: the GEMM above for this genome.\"\"\" "
                         "gemm_kernel(a_desc, b_desc, None, c_desc, None, None, None, None, partials, None, M, N, K, "
                         "None, None, BLOCK_M, BLOCK_N, BLOCK_K, BLOCK_N, 0, GROUP_M, COL_MAJOR=False, "
                         "NUM_STAGES=NUM_STAGES, CONSUMERS=CONSUMERS, CONSUMER_WARPS=CONSUMER_WARPS, ROW_SPLIT=False, "
                         "SPLIT_K=SPLIT_K, STREAM_K=False, SCALE=False, BIAS=False, ACTIVATION=None, RESIDUAL=False)")
    # the epilogue is the second launch's
    assert "sum_partials(partials, c_ptr, bias_ptr, None, None, M, N, SPLIT_K, REDUCE_R, REDUCE_C" in " ".join(
        source.split())
    assert 'BIAS=True, ACTIVATION="gelu", RESIDUAL=False)' in " ".join(source.split("def split_k_reduce(")[1].split())
    assert "'SPLIT_K': 3," in source  # the two launches: test_gluon_plan.py
    module = load_source(source)
    m, n, splits = 37, 70, 3
    gen = torch.Generator().manual_seed(0)
    partials = torch.randn(splits * m, n, generator=gen)
    bias = torch.randn(n, generator=gen)
    c = torch.empty(m, n)
    rows = 16  # the plan picks 8, 16 or 32 (test_gluon_plan.py)
    grid = ((m + rows - 1) // rows, (n + module.REDUCE_C - 1) // module.REDUCE_C)
    module.split_k_reduce[grid](partials, c, bias, m, n, splits, rows, module.REDUCE_C)
    expected = torch.nn.functional.gelu(partials.view(splits, m, n).sum(0) + bias)
    torch.testing.assert_close(c, expected, rtol=1e-5, atol=1e-5)
    too_big = op.problem((16384, 16384, 4096), "bf16")
    assert any("64-bit" in r for r in op.family.violations(g.replace(split_k=12), too_big, HOPPER))


def test_unaligned_rows_take_padded_copies_under_gluon_too():
    """Rows that are not 16-byte multiples (K = 588: A; N = 3001: B and C) keep the Gluon rendering through the
    launcher's padded rows, as the Triton rendering does, but not with the Gluon split-K, whose reduction writes
    C's rows unpadded; repair moves a Gluon genome there, and the seeds of such a problem include Gluon's."""
    rng = np.random.default_rng(0)
    for shape in ((16448, 1024, 588), (1000, 3001, 588), (1024, 3001, 1600)):
        problem = OP.problem(shape, "bf16")
        g = gluon(BLOCK_M=128, BLOCK_N=256, num_warps=8, num_stages=3, pad_rows=True)
        assert FAMILY.violations(g, problem, HOPPER) == []
        assert any("16-byte" in r and "pad_rows" in r
                   for r in FAMILY.violations(g.replace(pad_rows=False), problem, HOPPER))
        split = gluon(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3, pad_rows=True, split_k=2)
        assert any("padded rows" in r for r in FAMILY.violations(split, problem, HOPPER))
        fixed = FAMILY.repair(split.replace(pad_rows=False), problem, HOPPER, rng)
        assert (fixed["backend"], fixed["pad_rows"], fixed["split_k"]) == ("gluon", True, 1)
        assert FAMILY.violations(fixed, problem, HOPPER) == []
        assert any(s["backend"] == "gluon" and s["pad_rows"] for s in FAMILY.seeds(problem, HOPPER))
    assert any("changes nothing" in r for r in FAMILY.violations(gluon(pad_rows=True, num_warps=8), SQUARE, HOPPER))


@pytest.mark.parametrize("values", [dict(BLOCK_N=256, num_warps=8), dict(BLOCK_N=192, num_warps=8, num_stages=4),
                                    dict(BLOCK_M=192, BLOCK_N=192, consumers=3, consumer_split="rows")])
def test_gluon_launcher_reads_padded_rows_through_their_strides(values):
    """Under pad_rows the descriptors of A, B and C take the padded copies' row strides and a call copies A (and a
    new B) first, C out last (its launches recorded on meta tensors, as the compile step finds them)."""
    import torch

    from evo.evaluate.compiler import record_launches
    from tests.operators.gemm.launches import load_jit

    problem = OP.problem((1000, 3001, 588), "bf16")
    g = gluon(**{"num_stages": 3, **values, "pad_rows": True})
    assert FAMILY.violations(g, problem, HOPPER) == [], FAMILY.violations(g, problem, HOPPER)
    source = OP.render(g, problem, HOPPER)
    ast.parse(source)
    assert "import weakref" in source and "def copy_rows_kernel" in source and "import triton.language as tl" in source
    module = load_jit(source)
    a, b, out = (torch.empty(*shape, dtype=torch.bfloat16, device="meta") for shape in ((1000, 588), (588, 3001),
                                                                                         (1000, 3001)))
    launches = record_launches(module, module.matmul, (a, b, out))
    assert [launch.fn.__name__ for launch in launches] == ["copy_rows_kernel"] * 2 + ["matmul_kernel",
                                                                                     "copy_rows_kernel"]
    descriptors = [x for x in launches[2].args if hasattr(x, "block_shape")]
    wide = len(descriptors) == 5
    assert [d.strides[0] for d in descriptors] == [592] + [3008] * (4 if wide else 2)  # rows of 16-byte multiples


@pytest.mark.slow
def test_gluon_kernels_on_padded_rows_compile_for_hopper(tmp_path):
    """The Gluon kernels of a problem whose rows of A, B and C are all unaligned compile for sm_90 with their
    padding copies (the kernel is the aligned one: the strides travel in the descriptors)."""
    problem = OP.problem((1000, 3001, 588), "bf16")
    cases = [("gemm", gluon(**{"num_stages": 3, **values, "pad_rows": True}).as_dict(), problem.sizes, "bf16")
             for values in (dict(BLOCK_N=256, num_warps=8), dict(BLOCK_N=192, num_warps=8, num_stages=4),
                            dict(BLOCK_M=192, BLOCK_N=192, consumers=3, consumer_split="rows"))]
    cases.append(("gemm+bias+gelu+residual", cases[0][1], problem.sizes, "bf16"))
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    assert all(r["status"] == "ok" for r in results), results
    assert len(list((tmp_path / "cache").rglob("copy_rows_kernel.ptx"))) >= 1


def test_a_320_wide_tile_is_256_and_64_columns_with_two_consumers_of_64_rows():
    """cuBLAS's 128x320 tile at 1152x4352x4096 (126 tiles: one wave of 132 SMs): valid only as two Gluon consumers
    that split the rows (each holds a 64x320 accumulator: 160 registers of its 232), rendered as two blocks."""
    problem = OP.problem((1152, 4352, 4096), "bf16")
    rows = gluon(BLOCK_M=128, BLOCK_N=320, num_warps=4, num_stages=2, consumers=2, consumer_split="rows")
    assert OP.family.violations(rows, problem, HOPPER) == []
    source = OP.render(rows, problem, HOPPER)
    compile(source, "gluon_gemm_320.py", "exec")
    assert "'BLOCK_N0': 256," in source and "'BLOCK_N1': 64," in source
    whole = gluon(BLOCK_M=128, BLOCK_N=320, num_warps=8, num_stages=2)  # one consumer: 160 of 128 registers
    assert any("registers per thread" in v for v in OP.family.violations(whole, problem, HOPPER))


def test_row_split_consumers_take_split_k_each_storing_its_rows_of_the_partials():
    """Long K over few tiles with 64-row consumers (issue 44): valid, rendered with both switches, and each
    consumer's partial store covers its own ROWS rows from BOX * ROWS on (compiled for sm_90 without spills:
    reports/gpu/gemm-long-k/README.md; run on a GPU by tests/gpu/test_gemm_long_k_gpu.py)."""
    problem = OP.problem((768, 768, 49152), "bf16")
    g = gluon(BLOCK_M=192, BLOCK_N=128, num_warps=4, num_stages=4, consumers=3, consumer_split="rows", split_k=4)
    assert OP.family.violations(g, problem, HOPPER) == []
    source = OP.render(g, problem, HOPPER)
    compile(source, "gluon_gemm_rows_split.py", "exec")
    call = entry(source)
    assert "ROW_SPLIT=True" in call and "SPLIT_K=SPLIT_K" in call
    assert "rows = pid_m * BLOCK_M + BOX * ROWS + gl.arange(0, ROWS," in source
    assert "def split_k_reduce(" in source
    # cuBLAS's 192x192 x 8 splits: a wide tile (128 + 64 columns) whose blocks each store their partial columns
    wide = gluon(BLOCK_M=192, BLOCK_N=192, num_warps=4, num_stages=3, consumers=3, consumer_split="rows", split_k=8)
    assert OP.family.violations(wide, problem, HOPPER) == []
    source = OP.render(wide, problem, HOPPER)
    compile(source, "gluon_gemm_wide_split.py", "exec")
    assert "'SPLIT_K': 8," in source and "'WIDE': True," in source and "'ROW_SPLIT': True," in source
    triton = OP.family.make(OP.family.base(BLOCK_M=128, BLOCK_N=192, split_k=8))  # its partials are one block
    assert any("not combined with split-K" in v for v in OP.family.violations(triton, problem, HOPPER))
