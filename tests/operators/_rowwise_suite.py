"""Tests every row-wise operator must pass (softmax, RMSNorm). A test module imports them with `import *`
and defines the `op` fixture; kernels run in the Triton interpreter on CPU tensors (fp16 and fp32)."""

from __future__ import annotations

import ast
import sys

import numpy as np
import pytest

import operators
from evo.evaluate.modules import load_source
from genomes.base import InvalidGenome
from tests.operators._rowwise_cases import (
    TEST_TARGET,
    base_source,
    coverage_cases,
    relative_error,
    run_case,
    sample_cases,
)

__all__ = [
    "test_registered",
    "test_every_gene_value_matches_reference",
    "test_random_sample_matches_reference",
    "test_source_is_standalone",
    "test_shared_genes_change_source",
    "test_looped_only_genes_are_neutral_in_single_pass",
    "test_other_widths_and_shapes",
    "test_out_argument_and_bad_input",
    "test_make_inputs",
    "test_tolerance_catches_wrong",
    "test_eager_baseline_matches_reference",
    "test_compile_baseline_is_lazy_and_fresh",
    "test_flops_bytes_throughput",
    "test_selfcheck_source",
    "test_render_rejects_invalid_genome",
]

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN in masked-off rows, never stored


def test_registered(op):
    assert op.name in operators.names()
    assert type(operators.get(op.name)) is type(op)
    assert op.dims == ("rows", "cols") and op.throughput_unit == "GB/s" and op.family.name == op.name


def test_every_gene_value_matches_reference(op):
    cases = coverage_cases(op, "fp32")
    for name, gene in op.family.genes.items():  # every value of every gene appears in some case
        assert set(gene.values) <= {g[name] for _, g in cases}, name
    for p, g in cases:
        err = run_case(op, p, g)
        assert err <= op.tolerance(p), f"{p.key} {g}: relative error {err:.3g}"


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_random_sample_matches_reference(op, dtype):
    cases = sample_cases(op, dtype, per_problem=3, seed=11)
    assert any(g["mode"] == "looped" for _, g in cases) and any(g["mode"] == "single" for _, g in cases)
    assert any(p.dims["rows"] % g["ROWS"] for p, g in cases), "no case with rows not a multiple of ROWS"
    assert any(p.dims["cols"] % g["BLOCK"] for p, g in cases), "no case with a ragged last column block"
    for p, g in cases:
        err = run_case(op, p, g, seed=3)
        assert err <= op.tolerance(p), f"{p.key} {g}: relative error {err:.3g}"


def test_source_is_standalone(op):
    p = op.problem((33, 300), "fp16")
    for genes in ({}, {"mode": "looped", "BLOCK": 128, "persistent": 2, "num_stages": 3, "ROWS": 2}):
        tree = ast.parse(base_source(op, p, **genes))
        imported = set()
        for node in tree.body:
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module.split(".")[0])
            elif isinstance(node, ast.Assign):  # module constants (and the empty plan cache): no work at import
                if ast.unparse(node) != "_PLANS = PlanCache()":
                    assert isinstance(node.value, ast.Constant), ast.unparse(node)
                    assert all(t.id.isupper() or t.id.startswith("_") for t in node.targets), ast.unparse(node)
            else:
                assert isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Expr)), ast.unparse(node)
        outside = {m for m in imported if m not in sys.stdlib_module_names}
        assert outside == {"torch", "triton"}
        entry = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == op.entry]
        kernels = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list]
        plan = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_plan")
        assert entry and len(kernels) == 1
        # launched through the bound launcher of evo's launch runtime, set up once per argument signature
        assert f"BoundKernel({kernels[0].name}, " in ast.unparse(plan) and "_plan(" in ast.unparse(entry[0])


def test_shared_genes_change_source(op):
    p = op.problem((33, 300), "fp16")
    base = base_source(op, p)
    assert "BLOCK = 512" in base and "rb = tl.program_id(0)" in base and "for start in" not in base
    # BLOCK: the step width of a looped kernel
    assert "BLOCK = 128\n" in base_source(op, p, mode="looped", BLOCK=128)
    assert "BLOCK = 256\n" in base_source(op, p, mode="looped", BLOCK=256)
    # ROWS: rows per program, masked rows when there are several
    two = base_source(op, p, ROWS=2)
    assert "ROWS = 2" in two and "row_mask = rows < n_rows" in two and "row_mask" not in base
    # mode: looped kernels walk the row twice
    looped = base_source(op, p, mode="looped", BLOCK=128)
    assert looped.count("for start in tl.range(0, N_COLS, BLOCK") == 2
    # persistent: a fixed grid of programs per SM looping over row blocks
    pers = base_source(op, p, persistent=4)
    assert f"PROGRAMS = {4 * TEST_TARGET.num_sms}" in pers and "for rb in tl.range(tl.program_id(0)" in pers
    assert "min(triton.cdiv(n_rows, ROWS), PROGRAMS)" in pers and "PROGRAMS" not in base
    # num_warps: a launch option
    assert "NUM_WARPS = 8" in base_source(op, p, num_warps=8) and "NUM_WARPS = 4" in base
    # num_stages: a launch option, and the pipelining hint of the loop that streams the loads
    staged = base_source(op, p, mode="looped", BLOCK=128, num_stages=3)
    assert "NUM_STAGES = 3" in staged and staged.count("num_stages=NUM_STAGES):") == 2
    assert "num_stages=NUM_STAGES):" not in looped and '"num_stages": NUM_STAGES}' in looped  # launch option
    pers_staged = base_source(op, p, persistent=1, num_stages=2)
    assert "tl.num_programs(0), num_stages=NUM_STAGES):" in pers_staged
    # evict_x: the hint on the last read of x
    assert 'eviction_policy="evict_first"' in base_source(op, p, evict_x="evict_first")
    assert 'eviction_policy="evict_last"' in base_source(op, p, evict_x="evict_last")
    assert "eviction_policy" not in base
    # store_y: the hint on the output's stores
    assert 'y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")' in base_source(
        op, p, store_y="evict_first")
    assert 'mask=mask, cache_modifier=".cs")' in base_source(op, p, store_y="streaming")
    assert "cache_modifier" not in base
    # keep_x: the hint on the first read of a looped kernel only
    kept = base_source(op, p, mode="looped", BLOCK=128, keep_x="evict_last")
    assert kept.count('eviction_policy="evict_last"') == 1 and "eviction_policy" not in looped


def test_looped_only_genes_are_neutral_in_single_pass(op):
    """Genes that mean nothing for a kernel leave its source alone, so the store sees one kernel."""
    p = op.problem((33, 300), "fp16")
    base = base_source(op, p)
    assert base_source(op, p, keep_x="evict_last") == base
    assert base_source(op, p, num_stages=3) == base and "NUM_STAGES" not in base  # no loop to pipeline


def test_other_widths_and_shapes(op):
    p = op.problem((7, 50), "fp32")
    # the rendered width, narrower and wider rows (a single pass widens its block), a loop whose block
    # covers some rows whole, several leading dimensions, and no rows at all
    for genes in ({}, {"mode": "looped", "BLOCK": 16, "ROWS": 2}, {"mode": "looped", "BLOCK": 64},
                  {"persistent": 1, "ROWS": 4}):
        module = load_source(base_source(op, p, num_warps=1, **genes))
        launch = getattr(module, op.entry)
        for sizes in ((5, 37), (4, 100), (6, 50), (2, 3, 50), (0, 50)):
            q = op.problem((int(np.prod(sizes[:-1])) or 1, sizes[-1]), "fp32")
            inputs = list(op.make_inputs(q, 1, device="cpu"))
            inputs[0] = inputs[0].reshape(sizes) if sizes[0] else inputs[0][:0]
            out = launch(*inputs)
            assert out.shape == inputs[0].shape
            if out.numel():
                ref = op.reference(*inputs)
                assert relative_error(out, ref) <= op.tolerance(q), (genes, sizes)
        inputs = list(op.make_inputs(p, 2, device="cpu"))
        inputs[0] = inputs[0].t().contiguous().t()  # same shape, not contiguous: the launcher copies it
        assert not inputs[0].is_contiguous()
        assert relative_error(launch(*inputs), op.reference(*inputs)) <= op.tolerance(p)


def test_out_argument_and_bad_input(op):
    import torch

    p = op.problem((7, 50), "fp32")
    launch = getattr(load_source(base_source(op, p, num_warps=1)), op.entry)
    inputs = op.make_inputs(p, 0, device="cpu")
    out = torch.full_like(inputs[0], 7.0)
    assert launch(*inputs, out=out) is out
    assert relative_error(out, op.reference(*inputs)) <= op.tolerance(p)
    with pytest.raises(ValueError, match="out must be"):
        launch(*inputs, out=torch.empty(7, 51))
    with pytest.raises(ValueError, match="out must be"):
        launch(*inputs, out=torch.empty(7, 50, dtype=torch.float16))
    with pytest.raises(ValueError, match="at least one element"):
        launch(torch.tensor(1.0), *inputs[1:])


def test_make_inputs(op):
    import torch

    p = op.problem((16, 64), "fp16")
    a, b, c = (op.make_inputs(p, s, device="cpu") for s in (1, 1, 2))
    for x, y, z in zip(a, b, c, strict=True):
        assert x.dtype == torch.float16 and torch.equal(x, y) and not torch.equal(x, z)
        assert (x != 0).float().mean() > 0.99 and 0.8 < x.float().std() < 1.2
    assert a[0].shape == (16, 64)
    meta = op.make_inputs(p, 0, device="meta")
    assert all(t.device.type == "meta" for t in meta) and [t.shape for t in meta] == [t.shape for t in a]


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
def test_tolerance_catches_wrong(op, dtype):
    import torch

    p = op.problem((64, 1000), dtype)
    inputs = op.make_inputs(p, 0, device="cpu")
    ref = op.reference(*inputs)
    rounded = ref.to(inputs[0].dtype)
    assert relative_error(rounded, ref) <= op.tolerance(p) / 3  # honest rounding passes with room
    dropped = rounded.clone()
    dropped[:, -8:] = 0  # a kernel that forgot the ragged tail of each row
    assert relative_error(dropped, ref) > op.tolerance(p)
    one_row = rounded.clone()
    one_row[5] = torch.roll(one_row[5], 1)  # one row's columns shifted by one
    assert relative_error(one_row, ref) > op.tolerance(p)


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_eager_baseline_matches_reference(op, dtype):
    names = [b.name for b in op.baselines()]
    assert names == ["torch_eager", "torch_compile"]
    p = op.problem((9, 300), dtype)
    inputs = op.make_inputs(p, 0, device="cpu")
    out = op.baselines()[0].make(p)(*inputs)
    assert out.dtype == inputs[0].dtype
    assert relative_error(out, op.reference(*inputs)) <= op.tolerance(p)


def test_compile_baseline_is_lazy_and_fresh(op):
    from operators.rowwise import fresh_function

    # (importing torch._dynamo takes seconds, so compiled baselines are not made here)
    compiled = op.baselines()[1]
    assert compiled.name == "torch_compile" and "default mode" in compiled.doc

    def f(x):
        return x + 1

    g = fresh_function(f)
    assert g(1) == 2 and g.__code__ is not f.__code__ and g.__code__ == f.__code__


def test_flops_bytes_throughput(op):
    p = op.problem((1000, 4096), "bf16")
    extra = 4096 * 2 if op.name == "rmsnorm" else 0  # the weight
    assert op.bytes(p) == 2 * 1000 * 4096 * 2 + extra
    assert op.bytes(op.problem((1000, 4096), "fp32")) == 2 * (2 * 1000 * 4096 * 2 + extra)
    assert 3 * 1000 * 4096 <= op.flops(p) <= 6 * 1000 * 4096
    assert op.throughput(p, 1.0) == pytest.approx(op.bytes(p) / 1e-3 / 1e9)


def test_selfcheck_source(op):
    import torch

    p = op.problem((6, 70), "fp32")
    code = op.selfcheck_source(p)
    tree = ast.parse(code)
    imports = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
    assert imports == {"torch"} and not [n for n in tree.body if isinstance(n, ast.ImportFrom)]
    ns: dict = {}
    exec(compile(code, "<selfcheck>", "exec"), ns)
    inputs = ns["selfcheck_inputs"]("cpu")
    assert tuple(ns["problem_sizes"](*inputs)) == p.sizes
    assert inputs[0].dtype == torch.float32 and (inputs[0] != 0).all()
    assert torch.equal(ns["selfcheck_inputs"]("cpu")[0], inputs[0])
    ref = ns["selfcheck_reference"](*inputs)
    assert torch.allclose(ref, op.reference(*inputs))
    assert relative_error(ns["selfcheck_baseline"](*inputs), ref) <= ns["SELFCHECK_TOLERANCE"]
    assert ns["SELFCHECK_TOLERANCE"] == op.tolerance(p)


def test_render_rejects_invalid_genome(op):
    p = op.problem((33, 300), "fp16")
    bad = op.family.make(op.family.base(BLOCK=256))  # a single pass that misses part of each row
    with pytest.raises(InvalidGenome, match="single pass needs BLOCK >= N=300"):
        op.render(bad, p, TEST_TARGET)
