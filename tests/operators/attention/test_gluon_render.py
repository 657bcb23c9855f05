"""The Gluon rendering of the attention genome on the CPU: what the module holds, and that the family's Gluon seeds
compile for sm_90 through the product's own ahead-of-time compile (the interpreter runs no Gluon; the GPU sample,
tests/gpu/test_attention_gpu.py, and tests/gpu/probe_gluon_attention.py check their results)."""

from __future__ import annotations

import ast

import pytest

import operators
from evo.problem import HOPPER
from genomes.attention_gluon import GLUON_FIXED
from operators._paste import MARKER, pasted_source
from operators.attention.module import GLUON_KERNEL_FILE
from tests.operators.hopper_compile import compile_for_hopper


def _config(text):
    """The CONFIG dict a rendered module holds."""
    start = text.index("\nCONFIG = ") + len("\nCONFIG = ")
    return ast.literal_eval(text[start:text.index("\n}\n", start) + 2])


def _module(name, shape, **values):
    op = operators.get(name)
    problem = op.problem(shape, "bf16")
    genome = op.family.make(op.family.base(**{**GLUON_FIXED, "backend": "gluon", **values}))
    return op.render(genome, problem, HOPPER)


def test_the_module_names_its_roles_and_constants():
    text = _module("attention+causal", (2, 32, 8, 1000, 1000, 128), BLOCK_M=64, BLOCK_N=128, num_warps=4,
                   num_stages=3, consumers=2, overlap=True, pingpong=True, q_order="reverse")
    ast.parse(text)
    config = _config(text)
    assert config == {"CAUSAL": True, "BLOCK_M": 64, "BLOCK_N": 128, "NUM_WARPS": 4, "NUM_STAGES": 3,
                      "REVERSE": True, "PROGRAMS": 0, "HEAD_D": 128, "CONSUMERS": 2, "OVERLAP": True,
                      "PINGPONG": True, "CONSUMER_REGS": 240, "PRODUCER_REGS": 24}
    for line in ("gl.warp_specialize(", "mbarrier.init(empty.index(i), count=CONSUMERS)",
                 "def attention(q: torch.Tensor", MARKER):
        assert line in text, line
    # the kernel is pasted verbatim: the module holds operators/attention/gluon_kernel.py from its marker on
    assert text.endswith(pasted_source(GLUON_KERNEL_FILE)) and "import triton.language" not in text
    single = _config(_module("attention", (1, 8, 8, 512, 512, 64), BLOCK_M=128, BLOCK_N=64, num_warps=8,
                             num_stages=2))
    assert (single["CONSUMERS"], single["CAUSAL"], single["OVERLAP"], single["PROGRAMS"]) == (1, False, False, 0)
    looping = _config(_module("attention", (1, 8, 8, 512, 512, 64), BLOCK_M=128, BLOCK_N=64, num_warps=8,
                              num_stages=2, persistent=1))
    assert looping["PROGRAMS"] == HOPPER.num_sms


def test_the_plan_checks_arguments_before_it_launches():
    """The module's own argument checks (run on CPU tensors: the checks come before any launch)."""
    torch = pytest.importorskip("torch")
    from evo.evaluate.modules import load_source

    pytest.importorskip("triton.experimental.gluon")
    module = load_source(_module("attention", (1, 4, 2, 256, 256, 128), BLOCK_M=128, BLOCK_N=64, num_warps=8,
                                 num_stages=2))
    q = torch.zeros(1, 4, 256, 64, dtype=torch.bfloat16)
    kv = torch.zeros(1, 2, 256, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="head_dim 128"):
        module.attention(q, kv, kv)
    with pytest.raises(ValueError, match="k and v must have one shape"):
        module.attention(torch.zeros(1, 4, 256, 128, dtype=torch.bfloat16), kv, kv[:, :1])


@pytest.mark.slow
def test_the_gluon_seeds_compile_for_hopper(tmp_path):
    """Every seed of head dim 128 (the larger shared memory); of the causal problem's (head dim 64), one per
    structure: consumers, ping-pong, overlap, persistent (its other seeds differ from one of those in tile sizes and
    stages only, whose shared memory the head-dim-128 seeds bound)."""
    cases, structures = [], set()
    for name, shape in (("attention", (1, 32, 8, 4096, 4096, 128)), ("attention+causal", (2, 16, 16, 1000, 1000, 64))):
        op = operators.get(name)
        problem = op.problem(shape, "bf16")
        for s in (s.as_dict() for s in op.family.seeds(problem, HOPPER) if s["backend"] == "gluon"):
            structure = (name, s["consumers"], s["pingpong"], s["overlap"], s["persistent"])
            if name == "attention" or structure not in structures:
                cases.append((name, s, shape, "bf16"))
            structures.add(structure)
    results = compile_for_hopper(cases, tmp_path, timeout_s=900)
    assert len(results) == 11 + 8
    bad = [r for r in results if r["status"] != "ok"]
    assert not bad, bad
    assert all(0 < r["shared"] <= HOPPER.smem_bytes for r in results)


def test_the_plan_reads_a_models_strided_tensors_in_place_and_copies_only_what_tma_cannot_read():
    """A transposed [B, L, H, D] q and K/V-cache slices: 4-d descriptors over the tensors as given (no copies);
    contiguous tensors: 2-d descriptors over [B x H x L, D]; a row stride TMA cannot take: copied."""
    torch = pytest.importorskip("torch")
    from evo.evaluate.modules import load_source

    pytest.importorskip("triton.experimental.gluon")
    module = load_source(_module("attention", (2, 32, 8, 1000, 1500, 128), BLOCK_M=64, BLOCK_N=128, num_warps=4,
                                 num_stages=2))
    meta = dict(device="meta", dtype=torch.bfloat16)
    q = torch.empty(2, 1000, 32, 128, **meta).transpose(1, 2)
    cache = torch.empty(2, 2, 8, 2048, 128, **meta)
    run = module.attention_plan(q, cache[0, :, :, :1500], cache[1, :, :, :1500], None, module.CONFIG)
    shapes = {pos: spec[0] for pos, spec in run.kernel.descriptors}
    assert run.strided and shapes == {0: [2, 32, 1000, 128], 1: [2, 8, 1500, 128], 2: [2, 8, 1500, 128]}
    kv = torch.empty(2, 8, 1500, 128, **meta)
    run = module.attention_plan(torch.empty(2, 32, 1000, 128, **meta), kv, kv, None, module.CONFIG)
    assert not run.strided and {pos: spec[0] for pos, spec in run.kernel.descriptors}[0] == [64000, 128]
    odd = torch.empty(2, 1000, 32 * 128 + 4, **meta)[..., :32 * 128].view(2, 1000, 32, 128).transpose(1, 2)
    # a row of 4100 bf16 is no 16-byte multiple: copied
    assert not module.attention_plan(odd, kv, kv, None, module.CONFIG).strided
