"""fp8_gemm in its three scale modes: rendered modules checked in the Triton interpreter (float8_e4m3fn loads and
tl.dot run on CPU tensors) against the fp64 reference, over seeds and seeded random genomes, on shapes whose M, N and
K are not multiples of the tiles; every structure (swap_ab, ordered split-K twice over one workspace, group-M order,
promotion, a W tile over several scale blocks); the scales as callers hold them; bad input in one line naming the
field; the baselines and the exported self-check against the reference."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.evaluate.check import run_check
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from operators._paste import MARKER
from operators.fp8_gemm.baselines import ContenderUnavailable, FP8Math, _scaled
from tests.fixtures.guarded import guarded

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = INTERPRETED_HOPPER
NAMES = ["fp8_gemm", "fp8_gemm+channel", "fp8_gemm+block"]
# (M, N, K) per mode: none a multiple of the tiles, K of the block mode a multiple of 128
SHAPES = {"fp8_gemm": [((20, 48, 96), "fp16"), ((5, 40, 72), "bf16")],
          "fp8_gemm+channel": [((33, 72, 100), "fp16"), ((3, 24, 64), "bf16")],
          "fp8_gemm+block": [((9, 200, 256), "bf16"), ((17, 130, 384), "fp16")]}


def _module(op, p, **genes):
    g = op.family.make(op.family.base(**genes))
    assert op.family.violations(g, p, TARGET) == [], str(g)
    return getattr(load_source(op.render(g, p, TARGET)), op.entry)


def _err(y, ref):
    return ((y.float() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("name,shape,dtype", [(n, s, d) for n in NAMES for s, d in SHAPES[n]])
def test_seeds_and_random_genomes_match_reference(name, shape, dtype):
    op = operators.get(name)
    p = op.problem(shape, dtype)
    rng = np.random.default_rng(sum(shape) + len(name))
    pool = op.family.seeds(p, TARGET)
    picked = [pool[i] for i in rng.choice(len(pool), size=min(3, len(pool)), replace=False)]
    for i, g in enumerate(picked + [op.family.random(rng, p, TARGET) for _ in range(3)]):
        module = load_source(op.render(g, p, TARGET))
        result = run_check(getattr(module, op.entry), op, p, seed=i, device="cpu")
        assert result.status == "ok", f"{p.key} {g}: {result.reason}"


# genomes that take every branch: swap_ab with an ordered split and a masked last K step, group-M over several rows
# of tiles, promotion, a W tile of 256 rows over three 128-row scale blocks (block mode: a scale per column), a and W
# through tensor descriptors (reads past M, N and K return zeros)
STRUCTURES = [dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=64, swap_ab=True, SPLIT_K=4, GROUP_M=1, num_stages=2),
              dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=4, num_stages=3),
              dict(BLOCK_M=32, BLOCK_N=64, BLOCK_K=32, SPLIT_K=2, GROUP_M=4),
              dict(BLOCK_M=16, BLOCK_N=256, BLOCK_K=128, num_warps=8, num_stages=1),
              dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, swap_ab=True, SPLIT_K=2, GROUP_M=1, memory="descriptor"),
              dict(BLOCK_M=32, BLOCK_N=128, BLOCK_K=128, GROUP_M=4, memory="descriptor")]


@pytest.mark.parametrize("genes", STRUCTURES)
@pytest.mark.parametrize("name", NAMES)
def test_every_structure_matches_reference_twice(name, genes):
    import torch

    op = operators.get(name)
    p = op.problem((40, 300, 384), "bf16")
    promote = {"promote": True} if name != "fp8_gemm+block" and genes.get("GROUP_M") == 4 else {}
    fn = _module(op, p, **genes, **promote)
    inputs = op.make_inputs(p, 3, "cpu")
    ref = op.reference(*inputs)
    first = fn(*inputs)
    assert first.dtype == torch.bfloat16 and first.shape == (40, 300)
    assert _err(first, ref) <= op.tolerance(p)
    again = fn(*inputs)  # a split's counters were left zeroed by the first call
    assert torch.equal(first, again)
    workspace = fn.__globals__["_PLANS"]
    for run in workspace.values():
        if run.workspace is not None:
            assert int(run.workspace[1].abs().sum()) == 0


def test_channel_scales_as_callers_hold_them():
    """One activation scale for every row, scales as columns [M, 1] / [N, 1], a of three dims, out= in fp32."""
    import torch

    op = operators.get("fp8_gemm+channel")
    p = op.problem((12, 40, 64), "fp16")
    fn = _module(op, p, BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, GROUP_M=1)
    a, w, a_scale, w_scale = op.make_inputs(p, 5, "cpu")
    ref = op.reference(a, w, a_scale, w_scale)
    assert _err(fn(a, w, a_scale.reshape(12, 1), w_scale.reshape(40, 1)), ref) <= op.tolerance(p)
    one = torch.tensor([0.01])
    assert _err(fn(a, w, one, w_scale), op.reference(a, w, one, w_scale)) <= op.tolerance(p)
    y3 = fn(a.reshape(3, 4, 64), w, a_scale, w_scale)
    assert y3.shape == (3, 4, 40) and _err(y3.reshape(12, 40), ref) <= op.tolerance(p)
    out = torch.full((12, 40), float("nan"), dtype=torch.float32)
    assert fn(a, w, a_scale, w_scale, out=out) is out and _err(out, ref) <= 1e-5  # fp32 out: the sums' own error


def _bad_calls(torch, name):
    """(what is wrong, the call's arguments, the words the one line must hold) for scale mode `name`."""
    op = operators.get(name)
    p = op.problem((8, 384, 256), "bf16")
    a, w, sa, sw = op.make_inputs(p, 0, "cpu")
    cases = [("a in bf16", (a.to(torch.bfloat16), w, sa, sw), "a must be a float8_e4m3fn tensor"),
             ("weight of another K", (a, w[:, :128], sa, sw), "weight must be a float8_e4m3fn tensor [N, K]"),
             ("weight in e5m2", (a, w.to(torch.float8_e5m2), sa, sw), "weight must be a float8_e4m3fn"),
             ("a_scale in fp16", (a, w, sa.half(), sw), "a_scale must be a float32 tensor"),
             ("w_scale in bf16", (a, w, sa, sw.bfloat16()), "w_scale must be a float32 tensor")]
    if name == "fp8_gemm":
        cases += [("w_scale per channel", (a, w, sa, torch.ones(384)), "w_scale must hold one scale")]
    elif name == "fp8_gemm+channel":
        cases += [("a_scale of 5", (a, w, torch.ones(5), sw), "a_scale must hold one scale per row of a (8,)"),
                  ("w_scale per tensor", (a, w, sa, sw[:1]), "w_scale must hold one scale per output channel (384,)"),
                  ("w_scale [N, 2]", (a, w, sa, torch.ones(384, 2)), "w_scale must hold one scale per output")]
    else:
        k200 = torch.zeros(8, 200).to(torch.float8_e4m3fn)
        cases += [("K of 200", (k200, torch.zeros(384, 200).to(torch.float8_e4m3fn), sa, sw),
                   "K=200 (a's last dimension) is not a multiple of 128"),
                  ("w_scale transposed", (a, w, sa, sw.t().contiguous()), "w_scale must be [3, 2]"),
                  ("w_scale per channel", (a, w, sa, torch.ones(384)), "w_scale must be [3, 2]"),
                  ("a_scale per row", (a, w, torch.ones(8), sw), "a_scale must be [8, 2]")]
    return op, p, cases


@pytest.mark.parametrize("name", NAMES)
def test_bad_input_is_one_line_naming_the_field(name):
    import torch

    op, p, cases = _bad_calls(torch, name)
    fn = _module(op, p, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, GROUP_M=1)
    for what, args, words in cases:
        with pytest.raises(ValueError) as e:
            fn(*args)
        assert words in str(e.value) and "\n" not in str(e.value), (what, str(e.value))
    tma = _module(op, p, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, memory="descriptor")
    a, w, sa, sw = op.make_inputs(p, 0, "cpu")
    shifted = a.reshape(-1)[8:8 + 7 * 256].view(7, 256)  # 7 rows starting 8 bytes into a: not 16-byte aligned
    with pytest.raises(ValueError, match="tensor descriptors .* need a and weight at 16-byte aligned addresses"):
        tma(shifted, w, sa if name == "fp8_gemm" else sa[:7], sw)
    with pytest.raises(ValueError, match="out must be a contiguous bfloat16, float16 or float32 tensor"):
        fn(*op.make_inputs(p, 0, "cpu"), out=torch.empty(8, 384, dtype=torch.int32))


def test_problems_and_variants_refused_in_one_line():
    with pytest.raises(ValueError, match=r"fp8_gemm\+block: K=200 is not a multiple of 128"):
        operators.get("fp8_gemm+block").problem((16, 256, 200), "bf16")
    with pytest.raises(ValueError, match="does not support dtype 'fp32'"):
        operators.get("fp8_gemm").problem((16, 256, 256), "fp32")
    for name in ("fp8_gemm+row", "fp8_gemm+channel+block", "fp8_gemm+tensor"):
        with pytest.raises(ValueError, match="fp8_gemm takes one scale mode after"):
            operators.get(name)


@pytest.mark.parametrize("name", NAMES)
def test_rendering_pastes_the_kernel_and_states_the_mode(name):
    op = operators.get(name)
    p = op.problem((16, 4096, 4096), "bf16")
    text = op.render(op.family.seeds(p, TARGET)[0], p, TARGET)
    assert MARKER in text and "def fp8_gemm_kernel(" in text and "def fp8_gemm(a, weight, a_scale, w_scale" in text
    assert f"'SCALES': {op.scales!r}" in text and "'OUT_DTYPE': 'bfloat16'" in text


@pytest.mark.parametrize("name", NAMES)
def test_baselines_match_reference(name):
    """The primary (torch._scaled_mm where it runs the mode, else the eager dequantize-then-matmul) and each torch
    way on its own; torch._scaled_mm either agrees or says why it cannot run."""
    op = operators.get(name)
    p = op.problem((24, 256, 256), "bf16")
    inputs = op.make_inputs(p, 1, "cpu")
    ref = op.reference(*inputs)
    by_name = {b.name: b for b in op.bench_baselines()}
    assert list(by_name) == ["torch_fp8", "scaled_mm", "dequant_matmul", "torch_compile"]
    for used in ("torch_fp8", "dequant_matmul"):
        assert _err(by_name[used].make(p)(*inputs), ref) <= op.tolerance(p), used
    try:
        fn = _scaled(FP8Math(op.scales), p, op.make_inputs)
    except ContenderUnavailable as e:
        assert str(e).startswith(f"torch._scaled_mm cannot run {op.scales} scales with bf16 output on cpu here")
    else:
        assert _err(fn(*inputs), ref) <= op.tolerance(p)


@pytest.mark.parametrize("name", NAMES)
def test_exported_self_check_runs_on_plain_torch(name):
    op = operators.get(name)
    p = op.problem((16, 256, 384), "fp16")
    namespace: dict = {}
    exec(compile(op.selfcheck_source(p), f"<{name} selfcheck>", "exec"), namespace)
    inputs = namespace["selfcheck_inputs"]("cpu")
    assert [tuple(t.shape) for t in inputs] == op.tensor_shapes(p)[:-1]
    assert tuple(namespace["problem_sizes"](*inputs)) == p.sizes
    ref = namespace["selfcheck_reference"](*inputs)
    assert _err(ref, op.reference(*inputs)) <= 1e-6
    assert _err(namespace["selfcheck_baseline"](*inputs), ref) <= namespace["SELFCHECK_TOLERANCE"]


def test_a_smoke_run_clips_block_problems_to_whole_groups():
    """The CPU smoke mode clips a problem's sizes to 64 first: block scales refuse a K of 64, so it takes 128."""
    from evo.evaluate.smoke import smoke_problem

    op = operators.get("fp8_gemm+block")
    p = op.problem((2048, 4096, 4096), "bf16")
    g = op.family.seeds(p, TARGET)[0]
    small = smoke_problem(op, g, p, TARGET)
    assert small.sizes == (128, 128, 128) and small.dtype == "fp16"
    result = run_check(getattr(load_source(op.render(g, small, TARGET)), op.entry), op, small, seed=0, device="cpu")
    assert result.status == "ok", result.reason


@pytest.mark.parametrize("file,name", [("fp8_gemm", "fp8_gemm"), ("fp8_gemm_channel", "fp8_gemm+channel"),
                                       ("fp8_gemm_block", "fp8_gemm+block")])
def test_experiments_load_with_llama_projections(file, name):
    from pathlib import Path

    from evo.experiment.config import load_experiment

    experiment = load_experiment(Path(__file__).resolve().parents[3] / "experiments" / f"{file}.yaml")
    assert experiment.operator == name
    sizes = {p.sizes for p in experiment.problems}
    assert {(16, 6144, 4096), (2048, 28672, 4096), (16, 4096, 14336), (2048, 4096, 4096)} <= sizes


def test_out_dtype_and_the_torch_op_with_its_fake():
    """out_dtype picks y's dtype (the module's by default); the entry as a torch custom op (evo.api) takes it as its
    fifth argument, computes the reference, and its fake gives the shape and dtype."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from evo.api import as_torch_op

    op = operators.get("fp8_gemm+block")
    p = op.problem((20, 200, 256), "bf16")
    entry = _module(op, p, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, GROUP_M=1)
    inputs = op.make_inputs(p, 2, "cpu")
    ref = op.reference(*inputs)
    assert entry(*inputs).dtype == torch.bfloat16
    half = entry(*inputs, out_dtype=torch.float16)
    assert half.dtype == torch.float16 and _err(half, ref) <= op.tolerance(op.problem((20, 200, 256), "fp16"))
    with pytest.raises(ValueError, match="out_dtype must be torch.bfloat16, torch.float16 or torch.float32"):
        entry(*inputs, out_dtype=torch.int8)
    with pytest.raises(ValueError, match="out is torch.float32 but out_dtype is torch.float16"):
        entry(*inputs, out=torch.empty(20, 200), out_dtype=torch.float16)
    fn = as_torch_op(entry, op, tag="test_fp8_gemm_op")
    for dtype in (torch.bfloat16, torch.float32):
        y = fn.op(*inputs, dtype)
        assert y.dtype == dtype and _err(y, ref) <= op.tolerance(p)
        assert fn(*inputs, dtype).dtype == dtype  # eager: the entry, out_dtype passed by name
    out = torch.empty(20, 200, dtype=torch.float16)
    assert fn(*inputs, torch.float16, out=out) is out and _err(out, ref) <= 3e-3
    with FakeTensorMode() as mode:
        fake = fn.op(*(mode.from_tensor(t) for t in inputs), torch.float16)
        assert tuple(fake.shape) == (20, 200) and fake.dtype == torch.float16


@pytest.mark.parametrize("edit,words", [(("16x256x256", "16x256x200"), "problems.shapes[0]: fp8_gemm+block: K=200 is "
                                         "not a multiple of 128"),
                                        (("fp8_gemm+block", "fp8_gemm+rowwise"), "operator: fp8_gemm takes one scale "
                                         "mode after '+'"),
                                        (("[fp16]", "[fp32]"), "unknown dtype for fp8_gemm+block 'fp32'")])
def test_evo_run_refuses_a_bad_experiment_in_one_line(tmp_path, edit, words):
    import subprocess
    import sys

    text = ("name: fp8\noperator: fp8_gemm+block\nproblems:\n  shapes: [16x256x256]\n  dtypes: [fp16]\n"
            "budget:\n  evaluations: 4\nexecutor:\n  kind: smoke\n")
    (tmp_path / "bad.yaml").write_text(text.replace(*edit))
    proc = subprocess.run([sys.executable, "-m", "evo", "run", "bad.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("genes", [dict(GROUP_M=4, persistent=1),
                                   dict(swap_ab=True, SPLIT_K=4, GROUP_M=1, persistent=2, memory="descriptor")])
def test_a_persistent_grid_walks_several_items_per_program(name, genes):
    """Rendered for a GPU of 3 SMs: 3 or 6 programs walk the 30 tiles (120 items with the split), twice over one
    workspace."""
    import torch

    from evo.problem import Target

    tiny = Target("3 SMs (Triton's CPU interpreter)", 90, 232448, 3, extra={"interpreted": True})
    op = operators.get(name)
    p = op.problem((40, 300, 384), "fp16")
    g = op.family.make(op.family.base(**{"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_stages": 2, **genes}))
    assert op.family.violations(g, p, tiny) == []
    module = load_source(op.render(g, p, tiny))
    assert module.CONFIG["PROGRAMS"] == 3 * genes["persistent"]
    inputs = op.make_inputs(p, 4, "cpu")
    first = module.fp8_gemm(*inputs)
    assert _err(first, op.reference(*inputs)) <= op.tolerance(p)
    assert torch.equal(first, module.fp8_gemm(*inputs))


def test_scaled_mm_gets_block_scales_in_cublaslt_layouts(monkeypatch):
    """Block scales as torch._scaled_mm takes them (aten ScaledBlas.cpp: a's 1x128 scales [M, K/128] column-major, W^T's
    128x128 scales [K/128, N/128] whose transpose is row-major); the column-major copy made once per scale tensor."""
    import torch

    seen = []
    monkeypatch.setattr(torch, "_scaled_mm", lambda a, b, scale_a, scale_b, out_dtype: seen.append(
        (scale_a, scale_b)) or torch.zeros(a.shape[0], b.shape[1], dtype=out_dtype))
    op = operators.get("fp8_gemm+block")
    a, w, sa, sw = op.make_inputs(op.problem((16, 384, 256), "bf16"), 0, "cpu")
    fn = FP8Math("block").scaled_mm(torch.bfloat16, layout=1)
    fn(a, w, sa, sw)
    fn(a, w, sa, sw)
    (first_a, first_b), (second_a, _) = seen
    assert first_a.shape == (16, 2) and first_a.stride() == (1, 16) and torch.equal(first_a, sa)
    assert first_b.shape == (2, 3) and first_b.t().is_contiguous() and torch.equal(first_b.t(), sw)
    assert second_a is first_a  # kept, not copied per call
    sa.mul_(2)  # written in place: copied again
    fn(a, w, sa, sw)
    assert seen[-1][0] is not first_a and torch.equal(seen[-1][0], sa)


def test_operands_that_are_not_contiguous_are_copied_even_for_descriptors():
    """A strided view of a starting 8 bytes into its storage: copied per call into fresh (aligned) rows, so the
    descriptor path runs it; the same bytes as a contiguous misaligned tensor are refused (test above)."""
    import torch

    op = operators.get("fp8_gemm+channel")
    p = op.problem((8, 256, 256), "fp16")
    fn = _module(op, p, BLOCK_M=16, BLOCK_N=64, BLOCK_K=64, GROUP_M=1, memory="descriptor")
    a, w, sa, sw = op.make_inputs(p, 0, "cpu")
    wide = torch.zeros(8, 264).to(torch.float8_e4m3fn)
    wide[:, 8:] = a
    view = wide[:, 8:]
    assert not view.is_contiguous() and view.data_ptr() % 16 == 8
    assert _err(fn(view, w, sa, sw), op.reference(a, w, sa, sw)) <= op.tolerance(p)



@pytest.mark.parametrize("swap_ab", [False, True])
def test_a_split_past_k_reads_no_scale_past_its_rows(swap_ab):
    """K = 384 in two splits of 256 (BLOCK_K 128): the second split's last whole step lies past K. Its a and W read as
    zeros, and its block scales must be the last group's: a read past the scale rows (whatever memory holds there,
    here NaN) made 0 x NaN and a NaN tile, seen once on a CPU run whose memory past the scales held NaN."""
    import torch

    op = operators.get("fp8_gemm+block")
    p = op.problem((17, 130, 384), "fp16")
    fn = _module(op, p, BLOCK_M=32, BLOCK_N=128, BLOCK_K=128, SPLIT_K=2, GROUP_M=1, swap_ab=swap_ab)
    inputs = op.make_inputs(p, 0, "cpu")
    y = fn(*(guarded(x) for x in inputs))
    assert bool(torch.isfinite(y).all())
    assert _err(y, op.reference(*inputs)) <= op.tolerance(p)
