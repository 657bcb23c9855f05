"""What a Hugging Face config's `quantization_config` says of the checkpoint's weights, read for the zoo's plan.

The zoo plans quantized weights one way (evo.zoo.fp8_problems): e4m3 weights with a scale per output channel, and
activations quantized per token at run time. A config whose quantization is that, or a special case of it, reads as
`quantization="fp8"`, and `evo zoo` then plans `--dtype fp8` unless its `--dtype` says otherwise:
- transformers' `fbgemm_fp8` (Meta's Llama-3.1 FP8 checkpoints): weights per channel, activations per token,
  dynamic (its `activation_scale_ub`, a cap on an outlier token's scale, is not modelled: the plan's kernels are
  the same);
- `compressed-tensors` in 8-bit floats (llm-compressor's "FP8-dynamic" checkpoints): weights per channel, or per
  tensor (one scale repeated over the channels), activations per token, dynamic.

Any other quantization is refused with a `ModelError` naming its field, because the plan would compute another
model. That covers transformers' `fp8` (128x128 weight blocks, as in DeepSeek-V3 and Qwen3-FP8; the `fp8_gemm+block`
operator runs them, not yet the zoo), static activation scales, and integer weights (AWQ, GPTQ, bitsandbytes, ...).
"""

from __future__ import annotations

from typing import Any

from evo.experiment.yaml_reader import describe
from evo.zoo.model_error import ModelError

__all__ = ["QUANTIZATIONS", "read_quantization"]

QUANTIZATIONS = ("", "fp8")  # none, or what evo.zoo.fp8_problems plans
FIELD = "quantization_config"
_BLOCK_NOTE = ("the zoo's FP8 plan takes a scale per output channel; the fp8_gemm+block operator runs 128x128 weight "
               "blocks on its own (experiments/fp8_gemm_block.yaml)")


def read_quantization(d: dict, file: str) -> str:
    """`d`'s quantization as ModelSpec.quantization: "" without a quantization_config, "fp8" for FP8 weights per
    channel with dynamic per-token activations; a ModelError naming the field for anything else."""
    q = d.get(FIELD)
    if q is None:
        return ""
    if not isinstance(q, dict):
        raise ModelError(file, FIELD, f"expected a mapping; got {describe(q)}")
    method = q.get("quant_method")
    if method == "fbgemm_fp8":
        return "fp8"
    if method == "fp8":
        block = q.get("weight_block_size", [128, 128])  # transformers' FineGrainedFP8Config default
        raise ModelError(file, f"{FIELD}.weight_block_size",
                         f"{describe(block)}: FP8 weights in blocks; {_BLOCK_NOTE}; the plan would compute "
                         "another model")
    if method == "compressed-tensors":
        return _compressed_tensors(q, file)
    raise ModelError(file, f"{FIELD}.quant_method",
                     f"{describe(method)}: evo's zoo plans FP8 weights with per-channel scales (fbgemm_fp8, or "
                     "compressed-tensors in 8-bit floats) or unquantized ones; no evo operator runs these weights")


def _compressed_tensors(q: dict, file: str) -> str:
    """An llm-compressor config: every group FP8 weights per channel (or tensor), FP8 activations per token, dynamic."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ModelError(file, f"{FIELD}.config_groups", f"expected a mapping of quantization groups; got "
                                                         f"{describe(groups)}")
    for name, group in groups.items():
        where = f"{FIELD}.config_groups.{name}"
        if not isinstance(group, dict):
            raise ModelError(file, where, f"expected a mapping; got {describe(group)}")
        _expect(group.get("weights"), f"{where}.weights", ("channel", "tensor"), False, file)
        _expect(group.get("input_activations"), f"{where}.input_activations", ("token",), True, file)
    return "fp8"


def _expect(scheme: Any, where: str, strategies: tuple[str, ...], dynamic: bool, file: str) -> None:
    """A group's weights or activations: 8-bit floats, one of `strategies`, dynamic scales or not."""
    if not isinstance(scheme, dict):
        raise ModelError(file, where, f"expected a mapping (8-bit floats); got {describe(scheme)}")
    if scheme.get("num_bits") != 8 or scheme.get("type") != "float":
        raise ModelError(file, f"{where}.num_bits", f"{describe(scheme.get('num_bits'))}-bit "
                                                    f"{describe(scheme.get('type'))}: the zoo plans 8-bit floats "
                                                    "(e4m3) only")
    if scheme.get("strategy") not in strategies:
        what = "the weights' scales per output channel (or tensor)" if not dynamic else "activation scales per token"
        raise ModelError(file, f"{where}.strategy", f"{describe(scheme.get('strategy'))}: the zoo's FP8 plan takes "
                                                    f"{what}")
    if bool(scheme.get("dynamic", False)) != dynamic:
        raise ModelError(file, f"{where}.dynamic",
                         f"{describe(scheme.get('dynamic'))}: the zoo's FP8 plan quantizes the activations per token "
                         "at run time (dynamic) and reads the weights' scales from the checkpoint (static)")
