"""The layer's floor (evo.bench.zoo_layer): per token count T, the bytes a decoder layer must move through HBM at the
least, over the copy bandwidth measured in the same run, and each way's share of that floor.

The bytes, as a layer fused into one perfect kernel would move them: every weight read once (the layer's parameters:
projections, biases, norm weights), the KV cache's `context` positions read and the T new positions written (keys and
values), and the activations that must cross HBM: the layer's input read and its output written. Intermediate
activations could stay on chip, so they are not counted. A MoE layer's weights are the experts T tokens can reach
(min(E, T k)) and the rest, its FLOPs k experts' per token; a Gemma-2 sliding layer reads at most its window's cached
positions. `hbm_ms` is that over the copy bandwidth (a device-to-device
copy, bytes read plus written, evo.evaluate.roofline.copy_bandwidth); a way's `floor_share` is hbm_ms over its time
(1.0: at the floor). The compute floor beside it (the layer's FLOPs at the GPU's dense peak, where the datasheet peak
is known) says where the layer is compute-bound instead, as prefill is: there the HBM share is low by nature.
"""

from __future__ import annotations

from typing import Any

from evo.zoo.goals import TIME_KEYS

__all__ = ["layer_floor", "floor_shares", "floor_markdown"]


def layer_floor(plain: Any, tokens: int, copy_GBps: float | None, gpu: str = "", dtype: str = "bf16"
                ) -> dict[str, Any]:
    """The floor of `plain` (an evo.zoo.layer.DecoderLayer, or a MoE or Gemma-2 layer) at `tokens` new tokens;
    `hbm_ms` None without a measured copy bandwidth (e.g. on the CPU), `compute_ms` None where no peak is known for
    `gpu` and `dtype`."""
    from evo.evaluate.roofline import peak_tflops

    s = plain.spec
    active = getattr(plain, "active_weights", None)  # a MoE layer: the experts `tokens` tokens reach, k per token
    if active is not None:
        weights, matmul_params = active(tokens)
    else:
        weights = sum(p.numel() * p.element_size() for p in plain.parameters())
        matmul_params = sum(p.numel() for name, p in plain.named_parameters() if name.endswith("proj.weight"))
    size = plain.kv_cache.element_size()
    window = getattr(plain, "window", 0)  # a Gemma-2 sliding layer reads the last `window` cached positions at most
    cached = min(plain.context, window) if window else plain.context
    kv = 2 * s.num_key_value_heads * s.head_dim * (cached + tokens) * size
    activations = 2 * tokens * s.hidden_size * size
    nbytes = weights + kv + activations
    # QK^T and PV of every query head over the keys it sees (the causal half of the new block ignored)
    flops = 2 * tokens * matmul_params + 4 * s.num_attention_heads * s.head_dim * tokens * (cached + tokens)
    peak = peak_tflops(gpu, dtype) if gpu else None
    return {"weights_bytes": weights, "kv_bytes": kv, "activation_bytes": activations, "bytes": nbytes,
            "copy_GBps": copy_GBps, "hbm_ms": nbytes / (copy_GBps * 1e9) * 1e3 if copy_GBps else None,
            "flops": flops, "peak_tflops": peak, "compute_ms": flops / (peak * 1e12) * 1e3 if peak else None}


def floor_shares(row: dict[str, Any]) -> dict[str, float]:
    """Time key (eager_ms, ..., zoo_compile_graph_ms) -> the row's HBM floor over that time; only the ways timed."""
    hbm = (row.get("floor") or {}).get("hbm_ms")
    if not hbm:
        return {}
    return {key: round(hbm / row[key], 4) for key in TIME_KEYS if row.get(key)}


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def floor_markdown(layers: list[dict[str, Any]]) -> list[str]:
    """zoo.md's section on the floor: per T, the bytes, the floors and each way's share of the HBM floor."""
    rows = [r for r in layers if r.get("floor")]
    if not rows:
        return []
    copy = next((r["floor"]["copy_GBps"] for r in rows if r["floor"].get("copy_GBps")), None)
    lines = ["", "## The layer's HBM floor", "",
             "Bytes a perfectly fused layer moves at the least (weights once, the KV cache's context read and the new "
             "tokens' keys and values written, the layer's input and output) over the copy bandwidth measured in this "
             + (f"run ({copy:.0f} GB/s)" if copy else "run (none on this device: no floor)")
             + "; each way's share of it (100%: at the floor). The compute floor (FLOPs at the dense peak) shows "
             "where the layer is compute-bound instead.", "",
             "| T | weights MB | KV MB | act. MB | HBM floor us | compute floor us | eager | compile | zoo_eager "
             "| zoo_compile | eager graph | compile graph | zoo_eager graph | zoo_compile graph |",
             "|" + " --- |" * 14]
    for r in rows:
        f, shares = r["floor"], r.get("floor_share") or {}
        cells = [str(r["tokens"]), f"{f['weights_bytes'] / 1e6:.1f}", f"{f['kv_bytes'] / 1e6:.2f}",
                 f"{f['activation_bytes'] / 1e6:.3f}",
                 "-" if f.get("hbm_ms") is None else f"{f['hbm_ms'] * 1e3:.1f}",
                 "-" if f.get("compute_ms") is None else f"{f['compute_ms'] * 1e3:.1f}"]
        cells += [_pct(shares.get(key)) for key in TIME_KEYS]
        lines.append("| " + " | ".join(cells) + " |")
    return lines
