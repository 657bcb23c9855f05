"""How far the layer bench (evo.bench.zoo_layer) lets a way's output lie from the plain layer's, and on which tokens.

Two correct layers differ by their roundings: the dtype's tolerance (`TOLERANCE`) bounds that for a dense layer.
Two kinds of layer amplify a rounding into a larger, equally correct difference, and the bench accounts for each:

- FP8 weights: a difference before a quantization step flips some e4m3 roundings in what follows, so the tolerance
  of each T is at least the FP8 layer's own error against the bf16 layer of the same seed
  (`fp8_quantization_error`).
- Mixture-of-Experts routing: a token whose k-th and (k+1)-th largest router logits lie within the dtype's rounding
  of each other goes to either expert depending on the last bit of its logits, and then its output differs by a whole
  expert's share; torch.compile of the plain layer routes some of them otherwise too. Such near ties are found from
  the plain layer's own logits in the reference call (`reference_and_ties`: gap <= the dtype's tolerance times the
  largest logit magnitude) and left out of every way's comparison; their count is recorded. Every other token must
  match as a dense layer's. The decode loop (evo.bench.zoo_decode) applies the same rule to its last step's token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["TOLERANCE", "fp8_quantization_error", "near_ties", "reference_and_ties", "with_router_logits"]

# bf16 and fp16: gemm_epilogue's tolerances (a layer's output is a residual plus a few such GEMMs' sums); fp32:
# the GPU's tl.dot rounds fp32 operands to tf32 (11 bits) where the plain layer's matmuls stay fp32, as there.
TOLERANCE = {"bf16": 1.5e-2, "fp16": 3e-3, "fp32": 3e-3}


def fp8_quantization_error(plain: Any, bf16: Any, x: Any) -> float:
    """The FP8 layer's output on `x` against the bf16 layer's of the same seed (what FP8 weights cost)."""
    import torch

    from evo.evaluate.check import relative_error

    with torch.no_grad():
        return relative_error(plain(x), bf16(x))


def reference_and_ties(plain: Any, x: Any, margin: float) -> tuple[Any, Any]:
    """The plain layer's output on `x` (the reference every way is checked against) and, from the router logits of
    that same call, the [T] bool tensor of its tokens whose top-k routing is a near tie (the k-th and (k+1)-th largest
    logits within `margin` times the largest logit magnitude); None in place of the ties for a layer without routing."""
    import torch

    with torch.no_grad():
        ref, logits = with_router_logits(plain, lambda: plain(x))
    return ref, None if logits is None else near_ties(logits, plain.spec.experts_per_token, margin)


def with_router_logits(layer: Any, call: Callable[[], Any]) -> tuple[Any, Any]:
    """(what `call()` returns, the router logits [T, E] of the MoE `layer`'s last forward in it), `layer` keeping its
    logits only for that call; None in place of the logits for a layer without routing (nothing is set on it)."""
    if not hasattr(layer, "keep_router_logits"):
        return call(), None
    layer.keep_router_logits = True
    try:
        return call(), layer.router_logits
    finally:
        layer.keep_router_logits, layer.router_logits = False, None


def near_ties(logits: Any, k: int, margin: float) -> Any:
    """The [T] bool tensor of the tokens of router `logits` [T, E] whose top-`k` choice is a near tie: the k-th and
    (k+1)-th largest logits within `margin` times the largest logit magnitude."""
    import torch

    if k >= logits.shape[-1]:  # every expert is taken: no choice to tie
        return torch.zeros(logits.shape[0], dtype=torch.bool, device=logits.device)
    logits = logits.float()
    top = torch.topk(logits, k + 1, dim=-1).values
    return (top[:, k - 1] - top[:, k]) <= margin * float(logits.abs().max())
