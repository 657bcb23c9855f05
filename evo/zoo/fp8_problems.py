"""The kernel problems of a Llama-style layer with FP8 weights (`evo zoo MODEL --dtype fp8`), beside evo.zoo.problems'
bf16 plan: what an FP8 checkpoint with per-channel weight scales and per-token dynamic activation scales runs
(Llama-3 "FP8-dynamic" checkpoints, vLLM's fp8 path). Activations and outputs stay bf16 (fp16 under --smoke).

Per T, every projection is `fp8_gemm+channel` on its e4m3 weight in nn.Linear's layout: fp8_qkv (T x (q + 2 kv) x
hidden), fp8_o_proj, fp8_gate_up (the merged [gate; up] weight, 2 x intermediate rows) or fp8_up, fp8_down. What the
FP8 GEMM does not fuse runs in torch, each named in one note: the per-token quantization of the activations before
each projection, the norms' fusion (the `norm` role: rmsnorm, twice a layer), SwiGLU (or the GELU), the residual
adds and any bias. The head keeps bf16 weights, as FP8 checkpoints do: linear_lm_head (linear+rmsnorm, the final norm
fused) at T <= 16, lm_head (gemm) above. Attention, RoPE and the sampling softmax are the bf16 plan's.
Mixture-of-Experts and Gemma-2 layers are refused in one line: no FP8 operator serves their experts or their norms.
An FP8 zoo is named `<model>-fp8` (fp8_name) unless `--name` says otherwise, so it never shares a folder or a run
with the model's bf16 zoo.
"""

from __future__ import annotations

from typing import Any

from evo.zoo.model import ModelSpec

__all__ = ["FP8_OPERATOR", "FP8_ROLES", "WEIGHTS", "fp8_layer_problems", "fp8_name", "refuse_fp8"]

FP8_OPERATOR = "fp8_gemm+channel"
WEIGHTS = ("bf16", "fp8")  # the weights a plan takes: the activations' dtype, or e4m3 with per-channel scales
FP8_ROLES = ("fp8_qkv", "fp8_o_proj", "fp8_gate_up", "fp8_up", "fp8_down")  # role -> nn.Linear: evo.zoo.layer_fp8
SUFFIX = "-fp8"


def fp8_name(spec: ModelSpec) -> ModelSpec:
    """`spec` named `<name>-fp8` (the FP8 zoo's folder and runs), unless its name already ends so."""
    from dataclasses import replace

    return spec if spec.name.endswith(SUFFIX) else replace(spec, name=spec.name + SUFFIX)


def refuse_fp8(spec: ModelSpec) -> str | None:
    """Why `spec`'s layers cannot be planned with FP8 weights (one line), or None."""
    if spec.num_experts:
        return (f"--dtype fp8: {spec.name} is a Mixture-of-Experts model (num_experts {spec.num_experts}); no FP8 "
                "operator serves its experts yet (plan it in bf16)")
    if spec.post_norms:
        return (f"--dtype fp8: {spec.name} is a Gemma-2 layer (four norms, capped logits); the FP8 plan serves "
                "Llama-style layers only (plan it in bf16)")
    return None


def fp8_layer_problems(spec: ModelSpec, kp: Any, t: int, attention: Any, rope: list[Any], linear: bool) -> list[Any]:
    """The problems of one FP8-weight layer and the model's head at T = t (the caller adds the sampling softmax):
    `kp` makes a KernelProblem at this T, `attention` and `rope` are the bf16 plan's, `linear` says T <= 16 (the
    linear head, and the decode step's cache_attention where there is a KV cache)."""
    why = refuse_fp8(spec)
    if why:
        raise ValueError(why)
    h, inter, q_size = spec.hidden_size, spec.intermediate_size, spec.q_size
    torch_parts = ["the per-token FP8 quantization of each projection's input (amax / 448)",
                   "SwiGLU" if spec.mlp == "swiglu" else spec.mlp.upper(), "the residual adds"]
    if spec.attention_bias or spec.mlp_bias:
        torch_parts.append("the biases")
    note = (f"fp8 weights: every projection is {FP8_OPERATOR} (e4m3 weights, a scale per output channel and per "
            f"token); {', '.join(torch_parts)} run in torch; lm_head keeps bf16 weights")
    gated = spec.mlp == "swiglu"
    up = kp("fp8_gate_up" if gated else "fp8_up", FP8_OPERATOR, (t, (2 if gated else 1) * inter, h), note=note)
    cached = [kp("cache_attention", "cache_attention", attention.sizes)] \
        if linear and attention.operator and attention.sizes[4] > t else []
    head = kp("linear_lm_head", "linear+rmsnorm", (t, spec.vocab_size, h), scope="model") if linear \
        else kp("lm_head", "gemm", (t, spec.vocab_size, h), scope="model")
    return [kp("norm", "rmsnorm", (t, h), uses=2,
               note="norm: the input and post-attention norms of a layer (an FP8 projection fuses none)"),
            kp("fp8_qkv", FP8_OPERATOR, (t, q_size + 2 * spec.kv_size, h), note=note),
            *rope, attention, *cached,
            kp("fp8_o_proj", FP8_OPERATOR, (t, h, q_size), note=note), up,
            kp("fp8_down", FP8_OPERATOR, (t, h, inter), note=note), head]
