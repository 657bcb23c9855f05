"""The layer bench's two layers of a model's kind (evo.zoo.layers: Llama-style, Mixture-of-Experts, Gemma 2), and the
one line saying which of the layer's parts run the zoo's kernels and which run torch's code.

The MoE layer's experts run in torch one of transformers 5's ways (`--experts`): `grouped_mm` (torch._grouped_mm,
static shapes: torch.compile and CUDA graphs take it) where this torch has it on a GPU, else `loop` (the eager loop
over the experts hit: a host sync that no graph captures, and that stops torch.compile(fullgraph=True)). A Gemma-2
layer is one layer of the stack (`--layer-index`, 0: a sliding-window layer; 1: a global one), its torch attention
transformers' eager path (`--gemma-attention eager`, the default: SDPA cannot cap) or FlexAttention (`flex`).
With FP8 weights (`--weights fp8`, evo.zoo.layer_fp8) the layer is a Llama-style one whose projections are e4m3 with
per-channel scales, torch running them by torch._scaled_mm where it runs, else dequantize + matmul (the line says
which).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["EXPERT_CHOICES", "build_layers", "layer_note", "pick_experts"]

EXPERT_CHOICES = ("auto", "loop", "grouped_mm")
# what each kind's torch code always runs, whatever the zoo holds (the plans' notes: evo.zoo.problems, gemma_problems)
_TORCH_PARTS = {
    "moe": ("the router's softmax and top-k", "the residual adds"),
    "gemma2": ("the residual adds after the post norms", "the layer's last residual add (a stack's next add_norm)"),
    "llama": (),
    "fp8": ("the per-token FP8 quantization of each projection's input", "SwiGLU (or GELU) after fp8_gate_up (fp8_up)",
            "the residual adds"),
}


def pick_experts(choice: str, device: str) -> str:
    """The experts way of `--experts`: `auto` is grouped_mm on a GPU where torch has torch._grouped_mm, else loop."""
    import torch

    if choice not in EXPERT_CHOICES:
        raise ValueError(f"--experts {choice!r}: expected one of {', '.join(EXPERT_CHOICES)}")
    if choice != "auto":
        return choice
    return "grouped_mm" if device == "cuda" and hasattr(torch, "_grouped_mm") else "loop"


def kind_name(spec: Any) -> str:
    return "gemma2" if spec.post_norms else "moe" if spec.num_experts else "llama"


def build_layers(spec: Any, zoo_ops: dict[str, Callable[..., Any]], dtype: Any, device: str, seed: int, context: int,
                 room: int, experts: str, layer_index: int, attention: str = "eager", weights: str = "bf16"
                 ) -> tuple[Any, Any, dict[str, Any]]:
    """(the plain layer, the same layer with the zoo's roles it takes patched in, the document's `layer` entry: kind,
    experts way, layer index, window and torch attention, and the zoo's roles this layer does not take); ValueError in
    one line where the zoo serves none of its roles or an argument does not fit."""
    from evo.zoo.layers import decoder_layer
    from evo.zoo.patch import patch, roles_of

    def make() -> Any:
        return decoder_layer(spec, experts=experts, layer_index=layer_index, attention=attention, dtype=dtype,
                             device=device, seed=seed, context=context, max_tokens=room, weights=weights)

    plain = make()  # one seed, so both layers hold the same weights
    ops = {role: op for role, op in zoo_ops.items() if role in roles_of(plain)}
    if not ops:
        raise ValueError(f"the zoo module serves none of {spec.name}'s layer roles ({', '.join(roles_of(plain))})")
    kind = "fp8" if weights == "fp8" else kind_name(spec)
    info: dict[str, Any] = {"kind": kind, "unused_roles": sorted(set(zoo_ops) - set(ops))}
    if kind == "fp8":
        info.update(weights="fp8", torch_way=plain.torch_way, torch_way_note=plain.torch_way_note)
    if kind == "moe":
        info["experts"] = experts
    if kind == "gemma2":
        info.update(layer_index=layer_index, window=plain.window, attention=attention)
    return plain, patch(make(), ops), info


def layer_note(spec: Any, plan: list[Any], roles: dict[str, str], info: dict[str, Any]) -> str:
    """One line: the layer's parts the zoo runs (its roles and their operators) and those torch runs (the plan's roles
    the zoo lacks, those no operator serves, and the kind's own torch parts)."""
    kind = info["kind"]
    layer_roles = [p for p in plan if p.scope == "layer"]
    lacking = sorted({p.role for p in layer_roles if p.role not in roles and p.role != "cache_attention"})
    torch_parts = [*(f"{r} (not in the zoo)" if any(p.role == r and p.operator for p in layer_roles)
                     else f"{r} (no operator)" for r in lacking), *_TORCH_PARTS[kind]]
    if kind == "moe":
        if not {"moe_gate_up", "moe_down"} <= set(roles):
            torch_parts.append("the experts' GEMMs of the moe roles not in the zoo")
        if spec.shared_expert_size:
            torch_parts.append("the shared expert's sigmoid gate")
    if kind == "gemma2" and roles.get("gate_up") == "gemm":
        torch_parts.append("GeGLU after the gemm gate_up (T > 16)")
    zoo = ", ".join(f"{r} ({op})" for r, op in roles.items())
    what = {"moe": f"MoE layer, {spec.num_experts} experts top-{spec.experts_per_token}",
            "gemma2": f"Gemma-2 layer {info.get('layer_index', 0)}, "
                      + (f"a window of {info['window']} keys" if info.get("window") else "global"),
            "llama": "Llama-style layer",
            "fp8": "Llama-style layer, FP8 weights: e4m3 with per-channel scales, activations per token"}[kind]
    experts = {"moe": f"; the torch layer's experts run by {info.get('experts')} (--experts)",
               "gemma2": f"; the torch layer's attention runs by {info.get('attention')} (--gemma-attention)",
               "llama": "", "fp8": f"; {info.get('torch_way_note')}"}[kind]
    return f"{spec.name} ({what}): the zoo runs {zoo}; torch runs {'; '.join(torch_parts) or 'nothing else'}{experts}"
