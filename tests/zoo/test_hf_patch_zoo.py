"""The tiny zoo's real kernels (tests/fixtures/tiny_zoo.py: smoke-searched, fp16, T = 1 and 4) in Hugging Face
models of the four families, in Triton's interpreter: logits within the zoo's tolerance, generate() with a static
cache (its decode steps' masked attention on cache_attention), unpatch bit for bit; and a compiled decode step
(fullgraph) whose graph holds evo's ops."""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.zoo._hf_models import FAMILIES, prompt, recording, rel, tiny_model

pytest.importorskip("transformers")

from evo.api import load_zoo, patch_model, unpatch_model  # noqa: E402
from evo.zoo.uses import base_role  # noqa: E402

pytestmark = pytest.mark.slow


# what the patch may leave to transformers (evo.zoo.hf_patch says why); `norm`: a decode plan fuses every norm
# into the GEMMs (linear+rmsnorm), so the final norm has no kernel of its own
LEFT_TO_TORCH = {"sampling_softmax", "rope", "linear_lm_head", "norm"}


@pytest.mark.parametrize("family", FAMILIES)
def test_the_tiny_zoo_runs_each_family(tiny_zoo, family):
    model = tiny_model(family, torch.float16)
    ids = prompt()
    with torch.no_grad():
        ref = model(ids).logits
    tokens = model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static")
    ops = load_zoo(tiny_zoo)
    calls: list = []
    report = patch_model(model, recording(ops, calls), quiet=True)
    assert set(report.kept) <= LEFT_TO_TORCH and set(report.served) == set(ops) - LEFT_TO_TORCH
    assert all(t == (1, 4) for _, t in report.served.values())  # the zoo's token counts
    with torch.no_grad():
        assert rel(model(ids).logits, ref) < 5e-3
    served = {base_role(role) for role, _ in calls}
    assert {"qkv", "attention", "o_proj", "gate_up", "down"} <= served  # every GEMM and attention on the zoo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no elite measured for the decode steps' key lengths: the nearest serves
        assert torch.equal(model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static"),
                           tokens)
    unpatch_model(model)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, ref)


def test_a_compiled_decode_step_holds_the_zoo_s_ops(tiny_zoo):
    from transformers.generation import CompileConfig

    graphs: list[list[str]] = []

    def recording_backend(gm, example_inputs):  # dynamo's graph, run as traced
        graphs.append([str(n.target) for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward

    model = tiny_model("llama", torch.float16)
    ids = prompt()
    tokens = model.generate(ids, max_new_tokens=3, do_sample=False)
    patch_model(model, load_zoo(tiny_zoo), quiet=True)
    config = CompileConfig(backend=recording_backend, fullgraph=True, mode=None)
    config._compile_all_devices = True  # transformers compiles generate()'s decode steps on GPUs only, unless told
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, max_new_tokens=3, do_sample=False, cache_implementation="static",
                             compile_config=config)
    assert torch.equal(out, tokens)
    assert len(graphs) == 1  # one graph, no break: every decode step replays it
    evo_ops = [t for t in graphs[0] if t.startswith("evo.")]
    # at least the 4 GEMMs of each of the 2 layers (norms too where the zoo has them apart), and each layer's
    # attention over the static cache as cache_attention (the decode step has a mask: never attention+causal)
    cached = [t for t in evo_ops if t.startswith("evo.cache_attention_")]
    assert len(evo_ops) - len(cached) >= 2 * 4 and len(cached) == 2, evo_ops
    assert not any(t.startswith("evo.attention_causal") for t in evo_ops), evo_ops
