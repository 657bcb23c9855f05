"""moe_gate_up and moe_down: rendered modules checked in the Triton interpreter (fp16, fp32) against the fp32
reference over seeds and seeded random genomes, on shapes whose N and K are not multiples of the blocks; routing edge
cases (an expert with no tokens, every token to one expert, top-1 and top-2, masked slots, no tokens), persistent and
tile-major grids, both combines, the rendered text, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import operators
from evo.evaluate.check import run_check
from evo.evaluate.modules import load_source
from evo.problem import INTERPRETED_HOPPER
from operators._paste import MARKER, pasted_source
from operators.moe.operator import KERNEL_FILE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
TARGET = INTERPRETED_HOPPER
OPS = ["moe_gate_up", "moe_down"]


def _genomes(op, p, seeds, randoms, seed):
    rng = np.random.default_rng(seed)
    pool = op.family.seeds(p, TARGET)
    picked = [pool[i] for i in rng.choice(len(pool), size=min(seeds, len(pool)), replace=False)]
    return picked + [op.family.random(rng, p, TARGET) for _ in range(randoms)]


def _module(op, p, **genes):
    g = op.family.make(op.family.base(**genes))
    assert op.family.violations(g, p, TARGET) == [], str(g)
    return getattr(load_source(op.render(g, p, TARGET)), op.entry)


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shape,dtype", [((5, 4, 2, 40, 72), "fp32"), ((3, 8, 1, 48, 64), "fp16"),
                                         ((24, 6, 2, 72, 100), "fp16")])
def test_seeds_and_random_genomes_match_reference(name, shape, dtype):
    op = operators.get(name)
    p = op.problem(shape, dtype)
    for i, g in enumerate(_genomes(op, p, seeds=4, randoms=4, seed=sum(shape) + len(name))):
        module = load_source(op.render(g, p, TARGET))
        result = run_check(getattr(module, op.entry), op, p, seed=i, device="cpu")
        assert result.status == "ok", f"{p.key} {g}: {result.reason}"


# genomes that take every branch of the kernel: the small-M path, grouped and tile-major orders, a persistent grid
# smaller than the work (each program walks several items), routing in torch and in the kernel, both combines
SHAPES = [dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, swap_ab=True, routing="in_kernel"),
          dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, persistent=1),
          dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=64, work="tile_major", num_stages=1, routing="in_kernel"),
          dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, swap_ab=True, work="tile_major", persistent=1)]


def _routings(torch, tokens, experts):
    """Routing edge cases as (name, topk_ids) pairs."""
    gen = torch.Generator().manual_seed(7)
    spread = torch.stack([torch.randperm(experts, generator=gen)[:2] for _ in range(tokens)])
    no_three = torch.where(spread == 3, (spread + 1) % experts, spread)
    no_three = torch.where(no_three[:, :1] == no_three[:, 1:], torch.tensor([[0, 1]]), no_three)
    return [("spread top-2", spread), ("expert 3 has no tokens", no_three),
            ("every token to expert 2 (top-1)", torch.full((tokens, 1), 2)),
            ("every token to experts 4 and 0", torch.tensor([[4, 0]]).repeat(tokens, 1)),
            ("top-1 spread", spread[:, :1].to(torch.int32)),
            ("masked slots (id E)", torch.where(spread == 1, experts, spread))]


@pytest.mark.parametrize("genes", SHAPES)
def test_routing_edge_cases(genes):
    """gate_up once per routing, down with each combine (a top-1 routing has one: the kernel stores its row)."""
    import torch

    tokens, experts, n, k, hidden = 9, 6, 40, 48, 56
    up_op, down_op = operators.get("moe_gate_up"), operators.get("moe_down")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(tokens, hidden, generator=gen)
    w13 = torch.randn(experts, 2 * n, hidden, generator=gen) / hidden ** 0.5
    w2 = torch.randn(experts, k, n, generator=gen) / n ** 0.5
    for what, ids in _routings(torch, tokens, experts):
        top_k = ids.shape[1]
        weights = torch.rand(tokens, top_k, generator=gen) + 0.1
        gate_up = _module(up_op, up_op.problem((tokens, experts, top_k, n, hidden), "fp32"), **genes)
        h = gate_up(x, w13, ids)
        want_h = up_op.reference(x, w13, ids)
        assert float((h - want_h).norm() / want_h.norm()) < 1e-5, what
        if "masked" in what:  # a slot routed to no expert: a zero row, nothing added to its token
            assert not h[ids == experts].any()
        want_y = down_op.reference(want_h, w2, ids, weights)
        for combine in ("in_kernel", "torch_sum") if top_k > 1 else ("in_kernel",):
            down = _module(down_op, down_op.problem((tokens, experts, top_k, k, n), "fp32"), **genes, combine=combine)
            y = down(h, w2, ids, weights)
            assert float((y - want_y).norm() / want_y.norm()) < 1e-5, (what, combine)


def test_down_combine_is_deterministic_and_leaves_counters_zeroed():
    import torch

    op = operators.get("moe_down")
    p = op.problem((12, 4, 2, 40, 64), "fp32")
    module = load_source(op.render(op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32)), p, TARGET))
    inputs = op.make_inputs(p, 0, device="cpu")
    first = module.moe_down(*inputs)
    workspace, counters = next(iter(module._PLANS.values())).workspace
    assert counters is not None and not counters.any()  # the last program of each token's tile reset its count
    assert torch.equal(first, module.moe_down(*inputs))
    assert float((first - op.reference(*inputs)).norm() / op.reference(*inputs).norm()) < 1e-5


def test_no_tokens_and_out():
    import torch

    up, down = operators.get("moe_gate_up"), operators.get("moe_down")
    p = up.problem((4, 4, 2, 24, 32), "fp32")
    gate_up = _module(up, p, BLOCK_M=16, BLOCK_N=16, BLOCK_K=32)
    x, w, ids = up.make_inputs(p, 0, device="cpu")
    assert gate_up(x[:0], w, ids[:0]).shape == (0, 2, 24)
    out = torch.full((4, 2, 24), float("nan"))
    assert gate_up(x, w, ids, out=out) is out and bool(out.isfinite().all())
    pd = down.problem((4, 4, 2, 32, 24), "fp32")
    moe_down = _module(down, pd, BLOCK_M=16, BLOCK_N=16, BLOCK_K=32)
    h, w2, ids2, rw = down.make_inputs(pd, 0, device="cpu")
    assert moe_down(h[:0], w2, ids2[:0], rw[:0]).shape == (0, 32)
    flat = moe_down(h.reshape(8, 24), w2, ids2, rw)  # h as [T * top_k, K] too
    assert float((flat - down.reference(h, w2, ids2, rw)).norm()) < 1e-4


def test_bad_input_names_the_field():
    import torch

    up, down = operators.get("moe_gate_up"), operators.get("moe_down")
    p = up.problem((4, 4, 2, 24, 32), "fp32")
    gate_up = _module(up, p, BLOCK_M=16, BLOCK_N=16, BLOCK_K=32)
    x, w, ids = up.make_inputs(p, 0, device="cpu")
    with pytest.raises(ValueError, match=r"top_k \(topk_ids.shape\[1\]\) must be between 1 and the 4 experts; got 5"):
        gate_up(x, w, torch.zeros(4, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"topk_ids must be an int32 or int64 tensor \[T=4, top_k\]"):
        gate_up(x, w, ids.float())
    with pytest.raises(ValueError, match=r"x must be \[T, K\] with the T=3 rows of topk_ids"):
        gate_up(x, w, ids[:3])
    with pytest.raises(ValueError, match=r"weight must be \[E, 2N, K\] .* with K=32"):
        gate_up(x, w[:, :, :16], ids)
    with pytest.raises(ValueError, match=r"weight must be \[E, 2N, K\]"):
        gate_up(x, w[0], ids)
    with pytest.raises(ValueError, match="out must be a contiguous tensor of shape"):
        gate_up(x, w, ids, out=torch.empty(4, 24))
    pd = down.problem((4, 4, 2, 32, 24), "fp32")
    moe_down = _module(down, pd, BLOCK_M=16, BLOCK_N=16, BLOCK_K=32)
    h, w2, ids2, rw = down.make_inputs(pd, 0, device="cpu")
    with pytest.raises(ValueError, match=r"topk_weights must be a float tensor \[T=4, top_k=2\]"):
        moe_down(h, w2, ids2, rw[:, :1])
    with pytest.raises(ValueError, match=r"h must be \[T=4, top_k=2, K\]"):
        moe_down(h[:3], w2, ids2, rw)
    with pytest.raises(ValueError, match="TOPK=3 routes each token to more experts than E=2"):
        up.problem((4, 2, 3, 24, 32), "fp32")


def test_rendered_module_is_the_kernel_file_below_a_header():
    for name in OPS:
        op = operators.get(name)
        p = op.problem(op.example, "bf16")
        g = op.family.seeds(p, TARGET)[0]
        src = op.render(g, p, TARGET)
        body = pasted_source(KERNEL_FILE)
        assert src.endswith(body) and src.count(MARKER) == 1
        header = src[: -len(body)]
        assert "def moe_kernel" not in header and "CONFIG = {" in header and f"'GATE_UP': {name == 'moe_gate_up'}" \
            in header
        signature = "x, weight, topk_ids" if name == "moe_gate_up" else "h, weight, topk_ids, topk_weights"
        assert f"def {name}({signature}, out=None):" in header
        other = op.family.make(op.family.base(work="tile_major", persistent=2))
        assert op.render(other, p, TARGET).endswith(body)


def test_baselines_agree_with_the_reference():
    import torch

    for name in OPS:
        op = operators.get(name)
        p = op.problem((10, 4, 2, 24, 32), "fp32")
        inputs = op.make_inputs(p, 3, device="cpu")
        ref = op.reference(*inputs)
        names = [b.name for b in op.bench_baselines()]
        assert names == ["eager", "torch_compile", "grouped_mm", "grouped_mm_compile"]
        for b in op.bench_baselines():
            if b.name in ("torch_compile", "grouped_mm_compile"):
                continue  # compiling on this CPU takes a C++ toolchain and minutes: the GPU bench runs them
            got = b.make(p)(*inputs)
            assert got.shape == ref.shape and float((got - ref).norm() / ref.norm()) < 1e-5, b.name
        assert op.torch_schema.startswith("(Tensor ")
        assert op.empty_output(*inputs).shape == ref.shape
        if not hasattr(torch, "_grouped_mm"):
            pytest.skip("this torch has no torch._grouped_mm")


def test_grouped_mm_unavailable_says_why(monkeypatch):
    import torch

    from operators.moe.baselines import ContenderUnavailable

    op = operators.get("moe_gate_up")
    grouped = next(b for b in op.bench_baselines() if b.name == "grouped_mm")
    p = op.problem((10, 4, 2, 24, 32), "fp32")
    compiled = next(b for b in op.bench_baselines() if b.name == "grouped_mm_compile")
    monkeypatch.delattr(torch, "_grouped_mm", raising=False)
    with pytest.raises(ContenderUnavailable, match=r"torch .* has no torch._grouped_mm"):
        grouped.make(p)
    with pytest.raises(ContenderUnavailable, match=r"torch .* has no torch._grouped_mm"):  # compiled: the same reason
        compiled.make(p)


def test_selfcheck_source_matches_the_operator():
    import torch

    for name in OPS:
        op = operators.get(name)
        p = op.problem((6, 4, 2, 24, 40), "fp32")
        namespace: dict = {}
        exec(compile(op.selfcheck_source(p), name, "exec"), namespace)
        inputs = namespace["selfcheck_inputs"]("cpu")
        assert tuple(namespace["problem_sizes"](*inputs)) == p.sizes
        ref, base = namespace["selfcheck_reference"](*inputs), namespace["selfcheck_baseline"](*inputs)
        assert torch.allclose(ref, op.reference(*inputs), atol=1e-5)
        assert torch.allclose(base, op.baselines()[0].make(p)(*inputs), atol=1e-5)
        assert namespace["SELFCHECK_TOLERANCE"] == op.tolerance(p)


def test_in_kernel_routing_falls_back_to_torch_past_its_slots():
    """A genome with routing=in_kernel (a decode step's elite) runs a longer problem right: its plan sorts in torch."""
    from genomes import moe as genome_rules
    from operators.moe import kernel

    assert (kernel.ROUTE_IN_KERNEL_SLOTS, kernel.ROUTE_IN_KERNEL_CELLS) == \
        (genome_rules.ROUTE_IN_KERNEL_SLOTS, genome_rules.ROUTE_IN_KERNEL_CELLS)
    op = operators.get("moe_gate_up")
    small, large = op.problem((8, 4, 2, 24, 32), "fp32"), op.problem((40, 4, 2, 24, 32), "fp32")
    g = op.family.make(op.family.base(BLOCK_M=16, BLOCK_N=16, BLOCK_K=32, swap_ab=True, routing="in_kernel"))
    assert genome_rules.routes_in_kernel(small) and not genome_rules.routes_in_kernel(large)
    assert op.family.violations(g, large, TARGET) == []  # a soft rule: the elite transfers
    module = load_source(op.render(g, small, TARGET))
    for p in (small, large):
        inputs = op.make_inputs(p, 0, device="cpu")
        got = module.moe_gate_up(*inputs)
        want = op.reference(*inputs)
        assert float((got - want).norm() / want.norm()) < 1e-5
    assert [run.route_in_kernel for run in module._PLANS.values()] == [True, False]
