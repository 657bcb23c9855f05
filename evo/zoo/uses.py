"""Where a zoo op's own module says its baseline runs: the token counts a patch leaves to the layer's torch code.

An `evo export --all` module (each operator of a zoo module is one) holds `USES`, problem key -> ("evo" | "baseline",
why): at a measured problem where evo's elite did not beat its baseline, the op calls the baseline inside itself (the
unfused eager torch code of the operator: an fp32 RMSNorm, F.linear, SwiGLU). That call is opaque to torch.compile,
so Inductor cannot fuse it into its neighbours as it fuses the layer's own torch code, and a compiled patched layer
loses there (Qwen2-7B at T = 16 on an H200: 0.90x, 54 us of elementwise kernels). So a patch routes a role through
the op only at token counts where USES says evo (or has no entry: the nearest measured problem's choice serves, as
before), and runs the layer's own torch code at the others. A module without USES (exported before it existed) or a
plain callable runs evo everywhere.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["uses", "base_role", "split_tokens", "baseline_tokens"]


def uses(op: Callable[..., Any]) -> list[tuple[tuple[int, ...], str, str]] | None:
    """(sizes, dtype, "evo" | "baseline") of every measured problem of the module behind `op` that USES names, or None
    where the module has no USES (a plain callable, a module exported before USES)."""
    module = inspect.getmodule(getattr(op, "entry", op))
    table, variants = getattr(module, "USES", None), getattr(module, "_EVO_VARIANTS", None)
    if not isinstance(table, dict):
        return None
    out = []
    for key, choice in table.items():
        v = variants.get(key) if isinstance(variants, dict) else None
        if v is None or not isinstance(choice, tuple) or not choice:
            continue
        out.append((tuple(int(s) for s in v["sizes"]), str(v["dtype"]), str(choice[0])))
    return out


def base_role(key: str) -> str:
    """The layer role a zoo's role name serves: `linear_qkv` (the decode plan's linear operator) serves qkv,
    `cache_attention` (attention over a static cache, with its mask) and `attention_local` (Gemma 2's sliding-window
    layers) serve attention."""
    return "attention" if key in ("cache_attention", "attention_local") else key.removeprefix("linear_")


def split_tokens(role: str, sizes: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """A role's problem sizes as (token count, the other sizes a layer fixes), or None where they have another
    length: the attention roles (batch, heads, kv_heads, q_len, kv_len, head_dim) by the query length (the key length
    grows with the cache and is left out); rope_cache (tokens, heads, kv_heads, head_dim, context)
    without the cache's length; the norms and the sampling softmax (rows, cols); the moe roles (T, E, TOPK, N, K); the
    GEMM roles (M, N, K)."""
    role = base_role(role)
    if role == "attention":
        return (sizes[3], (sizes[1], sizes[2], sizes[5])) if len(sizes) == 6 else None
    if role == "rope":
        return (sizes[0], tuple(sizes[1:4])) if len(sizes) == 5 else None
    if role in ("norm", "post_norm", "add_norm", "sampling_softmax"):
        return (sizes[0], (sizes[1],)) if len(sizes) == 2 else None
    if role in ("moe_gate_up", "moe_down"):  # (T, E, TOPK, N, K)
        return (sizes[0], tuple(sizes[1:])) if len(sizes) == 5 else None
    return (sizes[0], tuple(sizes[1:])) if len(sizes) == 3 else None


def baseline_tokens(op: Callable[..., Any], role: str, dims: tuple[int, ...] | None, dtype: str) -> frozenset[int]:
    """The token counts at which the module behind `op` runs its baseline for `role` at these `dims` (what
    split_tokens leaves besides the token count; None: any) in `dtype` (e.g. "bf16"): the layer's torch code runs
    there. Empty for an op whose module has no USES."""
    table = uses(op) or []
    out = set()
    for sizes, d, use in table:
        split = split_tokens(role, sizes)
        if use == "baseline" and d == dtype and split is not None and (dims is None or split[1] == tuple(dims)):
            out.add(split[0])
    # a token count measured twice at these dims (it cannot be: one problem per shape) would count as evo if any was
    evo = {s[0] for sizes, d, use in table if use != "baseline" and d == dtype
           for s in [split_tokens(role, sizes)] if s is not None and (dims is None or s[1] == tuple(dims))}
    return frozenset(out - evo)
