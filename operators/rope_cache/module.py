"""The rendered rope_cache module: a header naming the genome's values, then real source pasted verbatim: the launch
runtime (evo/launch/runtime.py), the kernel (kernel.py) and the launcher (launcher.py), then one line making the
entry function. Nothing in the kernel or launcher text depends on the genome; the values reach the kernel as
tl.constexpr arguments."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import Problem, Target

__all__ = ["render_module", "pasted"]

_HERE = Path(__file__).parent


@cache
def pasted(name: str) -> str:
    """The text of this folder's module `name` from its paste marker (a line opening "# ---- ") on: what follows its
    docstring and imports, which a rendered module has already."""
    lines = (_HERE / name).read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("# ---- ")]
    if len(starts) != 1:
        raise RuntimeError(f"operators/rope_cache/{name} must hold exactly one '# ---- ' paste marker")
    return "\n".join(lines[starts[0]:]).rstrip("\n") + "\n"


def render_module(g: dict[str, Any], problem: Problem, target: Target) -> str:
    d = problem.dims
    roles = ("one role per program (query, key or value head blocks)" if g["roles"] == "split" else
             "a flat range of heads per program, the role decided per head")
    evict = "evict_first" if g["evict_qkv"] == "evict_first" else ""
    header = [
        f'"""evo kernel: rotary embedding and KV-cache write, rendered for {problem.key} on {target.name} '
        f'({d["heads"]} query heads, {d["kv_heads"]} KV heads, head dim {d["head_dim"]}).',
        "",
        f"One launch: programs of {g['BLOCK_T']} tokens x {g['BLOCK_H']} heads walking each half head in "
        f"{g['BLOCK_D']}-wide steps; {roles}.",
        "Call rope_cache(qkv, cos, sin, cache, start, out=None): it returns q rotated [1, heads, T, head_dim] and",
        "writes rotated keys and values into the cache at positions start..start+T-1 in place (see its docstring).",
        '"""',
        "",
        "import torch",
        "import triton",
        "import triton.language as tl",
        "",
        runtime_source(),
        "",
        f"BLOCK_T = {g['BLOCK_T']}  # tokens per program",
        f"BLOCK_H = {g['BLOCK_H']}  # heads per program",
        f"BLOCK_D = {g['BLOCK_D']}  # columns of each half head per step",
        f"SPLIT_ROLES = {g['roles'] == 'split'}  # each program holds heads of one role (query, key or value)",
        f"EVICT_QKV = {evict!r}  # eviction hint on the loads of qkv",
        f"NUM_WARPS = {g['num_warps']}",
        "",
        "",
        pasted("kernel.py"),
        "",
        pasted("launcher.py"),
        "",
        "rope_cache = rope_cache_entry(BLOCK_T, BLOCK_H, BLOCK_D, SPLIT_ROLES, EVICT_QKV, NUM_WARPS)",
    ]
    return "\n".join(header) + "\n"
