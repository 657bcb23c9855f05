"""The GEMM operator: rendered kernels compute A @ B for a seeded sample of genomes (Triton interpreter on
the CPU), the launcher validates its inputs, and the operator's facts (inputs, reference, tolerance, counts)."""

from __future__ import annotations

import ast
import sys

import pytest
import torch

import operators
from evo.evaluate.modules import load_source
from evo.problem import HOPPER, Problem, Target
from genomes.base import InvalidGenome
from tests.operators.gemm.sample import ALIGNED, RAGGED, cpu_cases

OP = operators.get("gemm")
FAMILY = OP.family
CASES = {dtype: cpu_cases(FAMILY, dtype) for dtype in ("fp16", "fp32")}


def _problem(shape: tuple[int, int, int], dtype: str = "fp16") -> Problem:
    return OP.problem(shape, dtype)


def _relative_error(module, problem: Problem, seed: int = 0) -> float:
    """Run the module's matmul into a NaN-poisoned output and return ||C - ref|| / ||ref|| (inf on NaN)."""
    a, b = OP.make_inputs(problem, seed, device="cpu")
    out = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype)
    result = module.matmul(a, b, out=out)
    assert result is out
    ref = OP.reference(a, b)
    if torch.isnan(out).any():
        return float("inf")
    return float((out.float() - ref).norm() / ref.norm())


@pytest.mark.parametrize("case", CASES["fp16"] + CASES["fp32"], ids=lambda c: c[0])
def test_sample_genome_matches_reference(case):
    _, genome, problem = case
    module = load_source(OP.render(genome, problem, HOPPER))
    assert _relative_error(module, problem) <= OP.tolerance(problem), str(genome)


def test_sample_is_large_and_covers_every_gene_value():
    for dtype, cases in CASES.items():
        assert len({g.hash for _, g, _ in cases}) >= 50
        shapes = {p.sizes for _, _, p in cases}
        assert {RAGGED, ALIGNED} <= shapes
        seen = {name: {g[name] for _, g, _ in cases} for name in FAMILY.genes}
        if dtype == "fp32":  # warp specialization is invalid for fp32 (see GemmFamily.violations)
            seen["warp_specialize"].add(True)
        seen["backend"].add("gluon")  # Gluon renderings run on GPUs only (see sample.cpu_cases), and so do
        seen["consumers"] |= {2, 3}  # their consumers, the row split and its 192-row tile
        seen["consumer_split"].add("rows")
        seen["BLOCK_M"].add(192)
        for name, gene in FAMILY.genes.items():
            assert seen[name] == set(gene.values), f"{dtype}: {name} never takes {set(gene.values) - seen[name]}"
        # split-K on a ragged problem and both kinds of descriptors on an aligned one are among the checks
        assert any(g["split_k"] > 1 and p.sizes == RAGGED for _, g, p in cases)
        for memory in ("descriptor", "host_descriptor"):
            assert any(g["memory"] == memory and p.sizes == ALIGNED for _, g, p in cases), memory
            assert any(g["memory"] == memory and g["persistent"] for _, g, _ in cases), memory
            assert any(g["memory"] == memory and g["split_k"] > 1 for _, g, _ in cases), memory


def test_the_check_catches_a_kernel_that_skips_a_k_step():
    problem = _problem(ALIGNED)
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    source = OP.render(genome, problem, HOPPER)
    broken = source.replace("k_tiles = tl.cdiv(K, BLOCK_K)", "k_tiles = tl.cdiv(K, BLOCK_K) - 1")
    assert broken != source
    assert _relative_error(load_source(broken), problem) > 10 * OP.tolerance(problem)


def test_the_check_catches_an_unwritten_edge():
    problem = _problem(RAGGED)
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    source = OP.render(genome, problem, HOPPER)
    broken = source.replace("(offs_cn[None, :] < N)", "(offs_cn[None, :] < N - 1)")
    assert broken != source
    assert _relative_error(load_source(broken), problem) == float("inf")


def test_split_k_counters_return_to_zero_and_repeat_launches_agree():
    problem = _problem(RAGGED, "fp32")
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, split_k=4))
    module = load_source(OP.render(genome, problem, HOPPER))
    a, b = OP.make_inputs(problem, 3, device="cpu")
    first = module.matmul(a, b)
    second = module.matmul(a, b)
    assert torch.equal(first, second)  # fixed summation order: bitwise repeatable
    (run,) = module._PLANS.values()
    _, counters = run.workspace
    assert counters.numel() == 3 * 2 and not counters.any()


# -- the module as a standalone artefact -------------------------------------------------------------------
def test_rendered_module_imports_only_torch_and_triton():
    for _, genome, problem in CASES["fp16"][::7]:
        tree = ast.parse(OP.render(genome, problem, HOPPER))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module or "")
        # besides the standard library: torch and triton only
        outside = {m for m in imported if m.split(".")[0] not in sys.stdlib_module_names}
        assert {m.split(".")[0] for m in outside} <= {"torch", "triton"}, imported
        assert ast.get_docstring(tree) and genome.hash in ast.get_docstring(tree)


def test_render_is_deterministic_and_rejects_invalid_genomes():
    problem = _problem(RAGGED)
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    assert OP.render(genome, problem, HOPPER) == OP.render(genome, problem, HOPPER)
    with pytest.raises(InvalidGenome, match="descriptor"):
        OP.render(genome.replace(memory="descriptor"), problem, HOPPER)
    for memory in ("descriptor", "host_descriptor"):
        with pytest.raises(InvalidGenome, match="sm_90"):
            OP.render(genome.replace(memory=memory), _problem(ALIGNED), Target("ampere", 80, 166912, 108))
    with pytest.raises(InvalidGenome, match="16 bytes"):
        OP.render(genome.replace(memory="host_descriptor"), problem, HOPPER)


# -- launcher input validation -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_module():
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    return load_source(OP.render(genome, _problem(ALIGNED), HOPPER))


@pytest.mark.parametrize("make, message", [
    (lambda: (torch.zeros(4, 8), torch.zeros(9, 4)), "inner dimensions"),
    (lambda: (torch.zeros(4, 8), torch.zeros(8)), "2-D"),
    (lambda: (torch.zeros(4, 8), torch.zeros(8, 4, dtype=torch.float16)), "dtype"),
    (lambda: (torch.zeros(4, 8, dtype=torch.int32), torch.zeros(8, 4, dtype=torch.int32)), "dtype"),
    (lambda: (torch.zeros(8, 4).t(), torch.zeros(8, 4)), "contiguous"),
])
def test_launcher_rejects_bad_inputs(plain_module, make, message):
    a, b = make()
    with pytest.raises(ValueError, match=message):
        plain_module.matmul(a, b)


def test_launcher_rejects_a_bad_out_and_handles_empty_shapes(plain_module):
    a, b = torch.ones(4, 8), torch.ones(8, 4)
    with pytest.raises(ValueError, match="out must be"):
        plain_module.matmul(a, b, out=torch.empty(4, 5))
    with pytest.raises(ValueError, match="out must be"):
        plain_module.matmul(a, b, out=torch.empty(4, 4, dtype=torch.float16))
    assert plain_module.matmul(torch.ones(0, 8), b).shape == (0, 4)
    assert torch.equal(plain_module.matmul(torch.ones(4, 0), torch.ones(0, 4)), torch.zeros(4, 4))


def test_row_aligned_launcher_rejects_other_strides():
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32))
    module = load_source(OP.render(genome, _problem(ALIGNED), HOPPER))
    assert module.CONFIG["ROW_ALIGN"] == 8 and module.CONFIG["ALIGN_K"] and module.CONFIG["ALIGN_N"]
    with pytest.raises(ValueError, match="divisible by 8"):
        module.matmul(torch.ones(4, 88, dtype=torch.float16), torch.ones(88, 45, dtype=torch.float16))


@pytest.mark.parametrize("memory", ["descriptor", "host_descriptor"])
def test_descriptor_launcher_rejects_unaligned_rows(memory):
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, memory=memory))
    module = load_source(OP.render(genome, _problem(ALIGNED), HOPPER))
    with pytest.raises(ValueError, match="16-byte"):
        module.matmul(torch.ones(4, 9, dtype=torch.float16), torch.ones(9, 16, dtype=torch.float16))
    storage = torch.ones(8 * 16 + 1, dtype=torch.float16)
    with pytest.raises(ValueError, match="aligned"):
        module.matmul(storage[1:].view(8, 16), torch.ones(16, 16, dtype=torch.float16))


# -- operator facts ----------------------------------------------------------------------------------------
def test_make_inputs_are_seeded_random_normals_in_the_problem_dtype():
    problem = _problem((33, 17, 65), "fp16")
    a, b = OP.make_inputs(problem, 7, device="cpu")
    assert a.shape == (33, 65) and b.shape == (65, 17) and a.dtype == b.dtype == torch.float16
    a2, b2 = OP.make_inputs(problem, 7, device="cpu")
    a3, _ = OP.make_inputs(problem, 8, device="cpu")
    assert torch.equal(a, a2) and torch.equal(b, b2) and not torch.equal(a, a3)
    assert (a != 0).float().mean() > 0.99 and 0.8 < float(a.float().std()) < 1.2
    meta_a, meta_b = OP.make_inputs(problem, 7, device="meta")
    assert meta_a.is_meta and meta_a.shape == a.shape and meta_b.dtype == torch.float16


def test_reference_tolerance_counts_and_baseline():
    a, b = torch.randn(5, 7, dtype=torch.float16), torch.randn(7, 3, dtype=torch.float16)
    ref = OP.reference(a, b)
    assert ref.dtype == torch.float32 and torch.allclose(ref, a.double().matmul(b.double()).float(), atol=1e-5)
    assert OP.tolerance(_problem(RAGGED, "fp16")) < OP.tolerance(_problem(RAGGED, "bf16"))
    assert OP.tolerance(_problem(RAGGED, "fp32")) <= 2e-3
    problem = _problem((2, 3, 5), "bf16")
    assert OP.flops(problem) == 60 and OP.bytes(problem) == (10 + 15 + 6) * 2
    assert OP.throughput(problem, 1e-3) == pytest.approx(60 / 1e-6 / 1e12)
    first = OP.baselines()[0]
    assert first.name == "cublas" and first.make(problem) is torch.matmul
    assert (OP.entry, OP.dims, OP.throughput_unit) == ("matmul", ("M", "N", "K"), "TFLOP/s")


def test_padded_rows_without_out_return_a_view_of_padded_rows():
    """pad_rows with C rows of other than 16-byte multiples: into `out` when given, else a strided view."""
    problem = OP.problem((40, 401, 73), "fp16")
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=192, BLOCK_K=32, memory="host_descriptor", pad_rows=True))
    module = load_source(OP.render(genome, problem, HOPPER))
    assert _relative_error(module, problem) <= OP.tolerance(problem)
    a, b = OP.make_inputs(problem, 1, device="cpu")
    c = module.matmul(a, b)
    assert tuple(c.shape) == (40, 401) and c.stride() == (408, 1)  # 401 halves rounded up to 16 bytes
    ref = OP.reference(a, b)
    assert float((c.float() - ref).norm() / ref.norm()) <= OP.tolerance(problem)


@pytest.mark.parametrize("cols", [588, 590, 589, 40])
def test_padding_copy_moves_every_element_and_nothing_past_the_row(cols):
    """The padding copy, whatever vector width its rows allow (4, 2, 1 elements; 8 for aligned rows), copies each
    row's `cols` elements into rows that start every 16 bytes, and leaves the bytes past each row as they were."""
    problem = OP.problem((64, 64, 589), "fp16")  # a module with the padding helpers
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, memory="host_descriptor", pad_rows=True))
    module = load_source(OP.render(genome, problem, HOPPER))
    rows = 37  # not a multiple of any block of rows
    src = torch.randn(rows, cols, dtype=torch.float16)
    buf = torch.full((rows, -(-cols // 8) * 8), 7.0, dtype=torch.float16)  # rows every 16 bytes, as _padded's
    dst = buf[:, :cols]
    module._row_copier(rows, cols, src.stride(0), dst.stride(0))(src, dst)
    assert torch.equal(dst, src) and bool((buf[:, cols:] == 7.0).all())


def test_padded_b_is_copied_once_per_b_tensor_and_version(monkeypatch):
    """pad_rows copies B into padded rows once: a call given the same B unchanged reuses the copy (as torch.compile
    pads a constant weight once); a B changed in place by torch, or another B tensor, is copied again."""
    problem = OP.problem((24, 201, 40), "fp16")
    genome = FAMILY.make(FAMILY.base(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, memory="host_descriptor", pad_rows=True))
    module = load_source(OP.render(genome, problem, HOPPER))
    a, b = OP.make_inputs(problem, 1, device="cpu")
    copies = []
    original = module._row_copier  # the plan makes its copiers with it: count the copies they make

    def counting(rows, cols, src_stride, dst_stride):
        copy = original(rows, cols, src_stride, dst_stride)
        return lambda src, dst: copies.append((rows, cols)) or copy(src, dst)

    monkeypatch.setattr(module, "_row_copier", counting)
    module._PLANS.clear()

    def check(b):
        out = module.matmul(a, b)
        ref = OP.reference(a, b)
        assert float((out.float() - ref).norm() / ref.norm()) <= OP.tolerance(problem)

    check(b)
    check(b)
    assert copies == [(40, 201)]  # the second call reused the padded B
    b.mul_(-1)  # changed in place: torch's version counter says so
    check(b)
    assert copies == [(40, 201)] * 2
    check(b.clone())  # another tensor with the same shape: copied too
    assert copies == [(40, 201)] * 3
    # under CUDA-graph capture the copy is part of the call (a replay must see B as it is then), every time
    monkeypatch.setattr(module.torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(type(b), "is_cuda", property(lambda t: True))  # (the check runs on the CPU)
    check(b)
    check(b)
    assert copies == [(40, 201)] * 5
