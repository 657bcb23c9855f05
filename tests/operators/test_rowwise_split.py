"""Split row-wise kernels (operators/rowwise_split.py) for softmax and RMSNorm: rendering, interpreter correctness
at ragged widths, and the cooperative kernel's bookkeeping. The cooperative kernel runs in the interpreter only in
a child process under a timeout: its launcher passes max_spins = 0 on the CPU, so no program waits, but a
regression that made one wait must fail this suite, not hang it."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import operators
from evo.evaluate.modules import load_source
from tests.operators._rowwise_cases import TEST_TARGET, base_genome, relative_error

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["softmax", "rmsnorm"])
def op(request):
    return operators.get(request.param)


def _split(op, p, **genes):
    genes.setdefault("BLOCK", op.family.single_block(p, genes.get("split", 1)))
    genes.setdefault("num_warps", 1 if genes["BLOCK"] <= 256 else 4)
    return base_genome(op, p, **genes)


def _source(op, p, **genes):
    return op.render(_split(op, p, **genes), p, TEST_TARGET)


def test_split_one_ignores_split_mode(op):
    p = op.problem((33, 300), "fp16")
    assert _source(op, p, split_mode="cooperative") == _source(op, p) and "SPLIT" not in _source(op, p)


def test_two_launch_source(op):
    p = op.problem((3, 1000), "fp16")
    src = _source(op, p, split=4)
    tree = ast.parse(src)
    kernels = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list]
    assert kernels == [f"{op.name}_partials", op.kernel_name]
    assert "SPLIT = 4  # programs per row" in src and "atomic" not in src
    assert "part = torch.empty((n_rows, " in src  # the workspace: once per plan, not per call
    assert src.index("part = torch.empty(") < src.index("def run(")
    assert "partials(x, part, n_cols, SPLIT, chunk, block)" in src
    # hints: keep_x on the first read (the partials kernel), evict_x on the second
    hinted = _source(op, p, split=4, keep_x="evict_last", evict_x="evict_first")
    part, write = hinted.split(f"def {op.kernel_name}(")
    assert 'eviction_policy="evict_last"' in part and 'eviction_policy="evict_first"' in write.split("_PLANS")[0]
    # single chunks have no loop to pipeline; looped chunks do
    assert _source(op, p, split=4, num_stages=3) == src
    looped = _source(op, p, split=4, mode="looped", BLOCK=64, num_stages=3)
    assert looped.count("for start in tl.range(0, CHUNK, BLOCK, num_stages=NUM_STAGES):") == 2


def test_cooperative_source(op):
    p = op.problem((5, 1000), "fp16")
    src = _source(op, p, split=2, split_mode="cooperative")
    tree = ast.parse(src)
    kernels = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.decorator_list]
    assert kernels == [op.kernel_name]
    for piece in ('tl.atomic_add(count_ptr + row, 1, sem="release")', 'sem="acquire"',
                  "while ((seen - goal) < 0) & (spins < max_spins):", "MAX_SPINS = 262144",
                  "resident_programs(", "cooperative_groups(fits, SPLIT, n_rows)",
                  'max_spins = 0 if x.device.type == "cpu" else MAX_SPINS',
                  "count = torch.zeros(n_rows, dtype=torch.int32"):
        assert piece in src, piece
    # one read of x in the normal path: the only other read is the fallback's, inside the else branch
    assert src.count("tl.load(x_ptr + row_start + cols,") == 1
    assert src.count("tl.load(x_ptr + row_start + cols_all") == 1
    # the counters are never zeroed per call: only in the plan
    run_body = src[src.index("    def run("):src.index("    run.kernel")]
    assert "zeros" not in run_body and "zero_" not in run_body


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_two_launch_matches_reference_at_ragged_widths(op, dtype):
    cases = [((1, 1000), dict(split=4)), ((9, 1000), dict(split=8)), ((3, 2050), dict(split=2)),
             ((2, 50), dict(split=64)),  # 63 of 64 chunks empty
             ((3, 1000), dict(split=4, mode="looped", BLOCK=64, num_stages=2)),
             ((1, 4000), dict(split=16, num_warps=2, store_y="streaming", evict_x="evict_first"))]
    if op.name == "softmax":
        cases.append(((3, 1000), dict(split=4, mode="looped", BLOCK=64, stats="lane")))
    for sizes, genes in cases:
        p = op.problem(sizes, dtype)
        module = load_source(_source(op, p, **genes))
        inputs = op.make_inputs(p, 5, device="cpu")
        for _ in range(2):  # the plan's workspace is reused
            out = getattr(module, op.entry)(*inputs)
            assert relative_error(out, op.reference(*inputs)) <= op.tolerance(p), (sizes, genes)
        # another width and leading dimensions through the same module
        q = op.problem((6, sizes[1] + 77), dtype)
        other = list(op.make_inputs(q, 6, device="cpu"))
        other[0] = other[0].reshape(2, 3, -1)
        assert relative_error(getattr(module, op.entry)(*other), op.reference(*other)) <= op.tolerance(q)


def test_softmax_split_survives_large_and_shifted_rows():
    import torch

    op = operators.get("softmax")
    p = op.problem((4, 1000), "fp32")
    x = torch.randn(4, 1000)
    x[0, 990:] += 50.0  # the maximum in the last chunk
    x[1] = torch.linspace(-80.0, 80.0, 1000)
    x[2, :] = 1000.0
    x[3, :500] = -1e4  # a chunk far below the row's maximum
    for genes in (dict(split=4), dict(split=4, mode="looped", BLOCK=64), dict(split=4, mode="looped", BLOCK=64,
                                                                          stats="lane")):
        out = load_source(_source(op, p, **genes)).softmax(x)
        assert relative_error(out, op.reference(x)) <= op.tolerance(p), genes
        assert torch.allclose(out.sum(-1), torch.ones(4), atol=1e-5)


_COOPERATIVE = """
import os, sys
os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, {root!r})
import torch
import operators
from evo.evaluate.modules import load_source
from tests.operators._rowwise_cases import TEST_TARGET, relative_error
for name in ("softmax", "rmsnorm"):
    op = operators.get(name)
    for sizes, dtype in (((5, 1000), "fp32"), ((1, 1000), "fp16"), ((7, 130), "fp16"), ((2, 50), "fp32")):
        p = op.problem(sizes, dtype)
        for stages in (1, 2):  # 2: the next row's chunk is prefetched before the wait
            values = op.family.base(num_warps=1, split=2, split_mode="cooperative", num_stages=stages)
            values["BLOCK"] = op.family.single_block(p, 2)
            g = op.family.make(values)
            assert not op.family.violations(g, p, TEST_TARGET)
            source = op.render(g, p, TEST_TARGET)
            assert ("x = x_next" in source) == (stages == 2)
            module = load_source(source)
            inputs = op.make_inputs(p, 1, device="cpu")
            entry = getattr(module, op.entry)
            for call in range(3):
                out = entry(*inputs)
                err = relative_error(out, op.reference(*inputs))
                assert err <= op.tolerance(p), (name, sizes, stages, err)
            run = next(iter(module._PLANS.values()))
            part, count = run.workspace
            # every call adds SPLIT arrivals per row: the next call starts at a generation boundary
            assert count.tolist() == [3 * 2] * sizes[0], count
            assert run.kernel.grid[0] == 2 * min(2, sizes[0])  # two groups of two programs (the interpreter's grid)
print("ok")
"""


def test_cooperative_runs_in_the_interpreter_without_waiting():
    code = textwrap.dedent(_COOPERATIVE.format(root=str(ROOT)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_split_kernels_compile_for_sm90_on_cpu(tmp_path):
    """The compile stage (meta inputs, recorded launches, ptxas for sm_90) handles both split modes: two kernels
    for two launches, one cooperative kernel whose grid the meta plan does not need to know."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import operators
        from evo.evaluate.compiler import compile_candidate
        from evo.evaluate.pipeline import make_candidate
        from evo.problem import HOPPER
        for name in ("softmax", "rmsnorm"):
            op = operators.get(name)
            p = op.problem((4, 50257), "bf16")
            for mode, kernels in (("two_launch", 2), ("cooperative", 1)):
                values = op.family.base(BLOCK=4096, num_warps=8, split=16, split_mode=mode)
                cand = make_candidate(op, op.family.make(values), p, HOPPER)
                result = compile_candidate(cand, HOPPER)
                assert result.status == "ok", (name, mode, result.reason)
                assert len(result.resources["kernels"]) == kernels, result.resources
                assert 0 < result.resources["registers"] <= 255 and result.resources["spills"] == 0
        print("ok")
    """)
    env = {"TRITON_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
