"""The rendered attention module: a header written by one template (what the kernel computes, the imports, the launch
runtime, the genome's constants as CONFIG and the entry function), then operators/attention/arguments.py and the
backend's kernel file (kernel.py for Triton, gluon_kernel.py for Gluon) pasted verbatim.

`attention(q, k, v, out=None, scale=None)` takes q[B, Hq, Lq, D] and k, v[B, Hkv, Lk, D] (any strides whose last
is 1; others are copied), Hq a multiple of Hkv, and returns o[B, Hq, Lq, D] in q's dtype. The plan for one argument
signature binds the kernels once and keeps the split partials and the counters of `reduce: last_program` with it,
so a call allocates only its output, and a CUDA graph may capture it (two streams running one plan at once would
share its partials: give each its own module).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import Problem, Target
from operators._paste import pasted_source

__all__ = ["render_module", "attention_config", "KERNEL_FILE", "GLUON_KERNEL_FILE", "ARGUMENTS_FILE",
           "PRODUCER_REGS", "CONSUMER_REGS", "THREE_CONSUMER_REGS"]

KERNEL_FILE = Path(__file__).with_name("kernel.py")
GLUON_KERNEL_FILE = Path(__file__).with_name("gluon_kernel.py")
ARGUMENTS_FILE = Path(__file__).with_name("arguments.py")

PRODUCER_REGS = 24  # registers per thread of the Gluon producer warp: indices and barrier phases
CONSUMER_REGS = 240  # of the second consumer warp group (the first gets what the kernel's budget leaves)
# of the second and third of three consumers (head dim 64, FlashAttention-3's 192 query rows): 16 warps share the
# 64K registers, 4 x 128 x 160 with the producer's warp group and what the first consumer keeps
THREE_CONSUMER_REGS = 160

_TRITON_IMPORTS = "import triton.language as tl"
_GLUON_IMPORTS = """\
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait"""

_HEADER = '''"""{title}

{summary}
"""

import math

import torch
import triton
{imports}

{runtime}

# the kernel's constants as the plan below reads them: the genome's (a model's SOFTCAP, WINDOW where present)
CONFIG = {config}

_PLANS = PlanCache()  # argument signature -> run(...): checks, grid and the bound kernels, done once


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None = None,
              scale: float | None = None) -> torch.Tensor:
    """{doc}"""
    key = (signature(q), signature(k), signature(v), None if out is None else signature(out))
    run = _PLANS.get(key)
    if run is None:
        run = _PLANS.add(key, attention_plan(q, k, v, out, CONFIG))
    return run(q, k, v, out, scale)


'''


def attention_config(g: dict[str, Any], causal: bool, problem: Problem, target: Target, softcap: float = 0.0,
                     window: int = 0) -> dict[str, Any]:
    """The CONFIG a rendered module's plan reads: the genome's structure as the kernel's switches, its tiles and
    launch options, the persistent grid's size on `target` (0: one program per work item), and the model's logit
    cap and sliding window (0: none; the Triton kernel's only: the rules keep such variants off Gluon)."""
    programs = g["persistent"] * target.num_sms
    common = {"CAUSAL": causal, "BLOCK_M": g["BLOCK_M"], "BLOCK_N": g["BLOCK_N"], "NUM_WARPS": g["num_warps"],
              "NUM_STAGES": g["num_stages"], "REVERSE": g["q_order"] == "reverse", "PROGRAMS": programs}
    if g["backend"] == "gluon":
        return {**common, "HEAD_D": problem.dims["head_dim"], "CONSUMERS": g["consumers"],
                "OVERLAP": bool(g["overlap"]), "PINGPONG": bool(g["pingpong"]),
                "CONSUMER_REGS": THREE_CONSUMER_REGS if g["consumers"] == 3 else CONSUMER_REGS,
                "PRODUCER_REGS": PRODUCER_REGS}
    return {**common, "PACK_GQA": bool(g["pack_gqa"]), "SPLIT": g["kv_split"],
            "LAST_PROGRAM": g["kv_split"] > 1 and g["reduce"] == "last_program",
            "MASK_ALL": g["mask_loop"] == "masked", "TILES_FIRST": g["grid"] == "tiles_first",
            "TMA": g["kv_load"] == "tma", "SOFTCAP": float(softcap), "WINDOW": int(window)}


def _summary(g: dict[str, Any], head_dim: int, target: Target) -> str:
    """The module docstring's paragraph on how the kernel is built."""
    if g["backend"] == "gluon":
        consumers = ("one consumer of NUM_WARPS warps" if g["consumers"] == 1 else
                     f"{g['consumers']} one-warp-group consumers, each with its own BLOCK_M rows,")
        roles = [text for on, text in ((g["persistent"], "a persistent grid loops over the work items"),
                                       (g["overlap"], "a block's softmax runs under the previous block's P V"),
                                       (g["pingpong"], "the consumers take turns at the tensor cores (ping-pong)"))
                 if on]
        return (f"Rendered with Gluon: a one-warp TMA producer streams K and V through a ring of {g['num_stages']} "
                f"shared-memory slots; {consumers} run the wgmma products and the online softmax in base 2 "
                f"(FlashAttention-3's roles{''.join('; ' + r for r in roles)}). Call attention(q, k, v, out=None, "
                f"scale=None) with fp16 or bf16 tensors of head dim {head_dim} on an sm_90 GPU.")
    structure = []
    if g["pack_gqa"]:
        structure.append("query heads sharing a KV head packed into one tile")
    if g["kv_load"] == "tma":
        structure.append("K and V loaded through tensor descriptors (TMA)")
    if g["persistent"]:
        structure.append(f"a persistent grid of {g['persistent']} programs per SM of {target.num_sms}")
    if g["kv_split"] > 1:
        how = "a second launch" if g["reduce"] == "launch" else "the last program of each tile"
        structure.append(f"keys split over {g['kv_split']} programs per tile, combined by {how}")
    return (f"FlashAttention-style online softmax in base 2, {g['BLOCK_M']}x{g['BLOCK_N']} tiles"
            + (f"; {'; '.join(structure)}." if structure else "."))


def _model_text(softcap: float, window: int) -> str:
    """What a model's switches add to the title and docstring ('' without them)."""
    parts = ([f"logits soft-capped at {softcap!r}"] if softcap else []) + \
        ([f"a sliding window of {window} keys"] if window else [])
    return f" ({' and '.join(parts)})" if parts else ""


def render_module(name: str, g: dict[str, Any], causal: bool, problem: Problem, target: Target, softcap: float = 0.0,
                  window: int = 0) -> str:
    """The module of genome values `g` (valid for `problem` on `target`) for operator `name`; `softcap` and `window`
    (0: none) a model's logit cap and sliding window."""
    shape, kind = problem.dims, "causal (bottom-right) " if causal else ""
    model = _model_text(softcap, window)
    title = (f"evo kernel: {kind}attention{model}, rendered for {problem.key} on {target.name} ({name}: "
             f"{shape['heads']} query heads on {shape['kv_heads']} KV heads, head dim {shape['head_dim']}).")
    config = attention_config(g, causal, problem, target, softcap, window)
    gluon = g["backend"] == "gluon"
    doc = (f"{'Causal (bottom-right) s' if causal else 'S'}oftmax(q k^T * scale) v per head, k and v shared by groups "
           "of query\n    heads (GQA)" + (f";{model[1:-1]}" if model else "")
           + "; scale defaults to 1/sqrt(head_dim). q [B, Hq, Lq, D], k and v [B, Hkv, Lk, D].")
    header = _HEADER.format(
        title=title, summary=textwrap.fill(_summary(g, shape["head_dim"], target), 116), doc=doc,
        imports=_GLUON_IMPORTS if gluon else _TRITON_IMPORTS, runtime=runtime_source().rstrip("\n"),
        config="{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in config.items()) + "}")
    return (header + pasted_source(ARGUMENTS_FILE) + "\n\n"
            + pasted_source(GLUON_KERNEL_FILE if gluon else KERNEL_FILE))
