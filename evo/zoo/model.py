"""A transformer model's kernel-relevant shape: `ModelSpec`, loaded from a Hugging Face-style `config.json` or a
short YAML file with ModelSpec's own field names.

Only what decides the kernels' shapes and epilogues is kept (sizes, heads, the MLP's kind, biases); no weights
are read or needed. Every bad input raises `ModelError`, one line naming the file and the field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from evo.experiment import limits
from evo.experiment.bounded_read import TooLarge, read_text_bounded
from evo.experiment.yaml_reader import UniqueKeyLoader, describe
from evo.zoo.gemma import GEMMA_KEYS, gemma2_fields, gemma_checked
from evo.zoo.model_error import ModelError
from evo.zoo.model_quant import QUANTIZATIONS, read_quantization

__all__ = ["ModelSpec", "ModelError", "load_model", "parse_model", "MLP_KINDS"]

MLP_KINDS = ("swiglu", "gelu", "gelu_tanh", "geglu")  # geglu: Gemma's gated GELU (tanh), evo.zoo.gemma
NORMS = ("rmsnorm", "gemma_rmsnorm")  # gemma_rmsnorm: x * rsqrt(mean(x^2) + eps) * (1 + weight), in fp32
MAX_SIZE = 1 << 24  # no real model has a dimension near 16 M; a bigger number is a typo
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # it names run directories, as an experiment's name does
# Hugging Face's hidden_act -> the MLP evo builds: silu in the gated (Llama/Qwen/Mistral) MLP is SwiGLU; the GELUs
# in a plain up -> act -> down MLP. gelu_new and gelu_pytorch_tanh are the tanh approximation.
_HF_ACT = {"silu": "swiglu", "swish": "swiglu", "gelu": "gelu", "gelu_new": "gelu_tanh",
           "gelu_pytorch_tanh": "gelu_tanh"}
_GATED_GELU = ("gemma", "gemma3", "gemma3_text")  # Gemma 1 and 3: not planned (gemma2 is, evo.zoo.gemma)
# Families whose MLP is gated, down(act(gate(x)) * up(x)), whatever hidden_act says (Hugging Face's *MLP classes),
# and families whose MLP is plain, down(act(up(x))); a model_type in neither keeps the activation's usual MLP
_GATED = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "phi3", "olmo", "olmo2",
          "granite", "cohere", "internlm2", "stablelm", "gemma2", *_GATED_GELU)
_PLAIN = ("gpt2", "gpt_neox", "gptj", "gpt_bigcode", "phi", "falcon", "starcoder2", "codegen", "bloom")
# Keys of what the plan computes only in Gemma 2's layer (model_type gemma2), found in another config
_UNPLANNED = {
    "hidden_activation": "Gemma's name for its activation (a gated GELU) outside a gemma2 config",
    "attn_logit_softcapping": "soft-capped attention logits (Gemma 2's) outside a gemma2 config",
    "final_logit_softcapping": "soft-capped final logits (Gemma 2's) outside a gemma2 config",
}
_MOE_KEYS = ("num_local_experts", "num_experts")  # Mixtral's, Qwen-MoE's expert counts (what the plan reads)
# MoE configs the plan does not compute: DeepSeek's routing (shared and grouped experts) and its attention (MLA)
_UNPLANNED_MOE = {
    "n_routed_experts": "DeepSeek-style experts (shared experts, grouped top-k routing): evo plans Mixtral- and "
                        "Qwen-MoE-style routed experts only",
    "kv_lora_rank": "multi-head latent attention (MLA): no evo operator runs it",
}
_YAML_KEYS = ("name", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
              "vocab_size", "norm", "mlp", "tie_word_embeddings", "attention_bias", "mlp_bias", "rms_norm_eps",
              "rope_theta", "sliding_window", "num_experts", "experts_per_token", "shared_expert_size",
              "norm_topk_prob", *GEMMA_KEYS, "quantization", "qk_norm")
_REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer as its kernels see it (per layer: norm, QKV, attention, O, MLP; then lm_head)."""

    name: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    norm: str = "rmsnorm"
    mlp: str = "swiglu"
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # a bias on the Q, K and V projections
    mlp_bias: bool = False
    rms_norm_eps: float = 1e-6  # the norms' epsilon (the reference layer's and the rmsnorm kernels' runtime eps)
    rope_theta: float = 10000.0  # the rotary embedding's base
    sliding_window: int = 0  # each query sees its last W keys only (0: all): the plan's causal attention is exact
    #                          while the KV cache and the new tokens hold at most W (evo zoo refuses longer ones)
    num_experts: int = 0  # a Mixture-of-Experts MLP of this many routed experts (0: a dense MLP), each
    #                       intermediate_size wide, every token routed to experts_per_token of them
    experts_per_token: int = 0
    shared_expert_size: int = 0  # Qwen-MoE's shared expert beside the routed ones: a dense SwiGLU MLP this wide
    norm_topk_prob: bool = True  # the top-k routing weights renormalised to sum to 1 (Mixtral's; Qwen-MoE's config
    #                              says, false by default): the reference MoE layer's routing (evo.zoo.layer_moe)
    # Gemma 2's layer (evo.zoo.gemma): four norms, capped logits (0: none), its query scale (0: head_dim) and the
    # layers the window covers (1: all; 2: even layers, the odd ones see every key); the plan computes the window
    post_norms: bool = False
    attn_logit_softcapping: float = 0.0
    final_logit_softcapping: float = 0.0
    query_pre_attn_scalar: float = 0.0
    sliding_window_pattern: int = 1
    quantization: str = ""  # the checkpoint's weights: "" unquantized; "fp8": e4m3 per output channel, which
    #                         `evo zoo` plans as --dtype fp8 unless told otherwise (evo.zoo.model_quant)
    qk_norm: bool = False  # Qwen3's RMSNorm over each head's q and k before RoPE (torch runs it: no fused kernel)

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim


def load_model(path: str | Path, name: str | None = None) -> ModelSpec:
    """The ModelSpec of a `.json` (Hugging Face config) or `.yaml`/`.yml` file, named `name` if given, else by its
    `name` field or file's stem; a file named config.* (Hugging Face's name for every model's config) by its
    `_name_or_path`, else the Hugging Face cache's repository or its folder, else its architecture and sizes."""
    path = Path(path)
    file = str(path)
    if path.suffix not in (".json", ".yaml", ".yml"):
        raise ModelError(file, "", "expected a .json (Hugging Face config.json) or .yaml model file")
    try:
        text = read_text_bounded(path, limits.MAX_TEXT_BYTES, why="a model config is a page of JSON or YAML")
    except FileNotFoundError:
        raise ModelError(file, "", "no such file") from None
    except IsADirectoryError:
        raise ModelError(file, "", "is a directory, not a model file") from None
    except TooLarge as e:
        raise ModelError(file, "", str(e)) from None
    except UnicodeDecodeError:
        raise ModelError(file, "", "is not UTF-8 text") from None
    except OSError as e:
        raise ModelError(file, "", f"cannot be read: {e.strerror or e}") from None
    generic = path.stem.lower() == "config"  # two models' config.json must not share one name (and output folder)
    spec = parse_model(text, "json" if path.suffix == ".json" else "yaml", file,
                       default_name=_folder_name(path) if generic else path.stem, name_from_config=generic)
    if name is None:
        return spec
    if not _NAME.fullmatch(name):
        raise ModelError(file, "name", f"expected letters, digits, '_', '-' or '.' (it names the experiments' files "
                                       f"and runs); got {describe(name)}")
    return replace(spec, name=name)


def _folder_name(path: Path) -> str | None:
    """The model a config file's folder names: the repository of a Hugging Face cache snapshot
    (models--ORG--NAME/snapshots/HASH/config.json), else the folder's own name."""
    folder = path.resolve().parent
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return _as_name(folder.parent.parent.name.split("--")[-1])
    return _as_name(folder.name)


def _as_name(text: str) -> str | None:
    """`text` made a model name (run directories are named after it), or None when nothing of it is left."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", text).lstrip("_.-").rstrip("-")
    return name or None


def _config_name(d: dict, default_name: str | None) -> str:
    """A Hugging Face config's own name for its model: the last part of `_name_or_path` (a hub id or the folder it
    was saved from), else `default_name` (its folder's), else its architecture and sizes."""
    given = d.get("_name_or_path")
    if isinstance(given, str) and (name := _as_name(given.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1])):
        return name
    if default_name:
        return default_name
    arch = d.get("architectures")
    base = arch[0] if isinstance(arch, list) and arch and isinstance(arch[0], str) else d.get("model_type")
    sizes = "x".join(str(d[k]) for k in ("hidden_size", "intermediate_size", "num_hidden_layers")
                     if isinstance(d.get(k), int) and not isinstance(d.get(k), bool))
    return _as_name(f"{base if isinstance(base, str) else 'model'}-{sizes}") or "model"


def parse_model(text: str, fmt: str, file: str = "<model>", default_name: str | None = "model",
                name_from_config: bool = False) -> ModelSpec:
    """A ModelSpec from `text` in `fmt` ("json": a Hugging Face config; "yaml": ModelSpec's field names), named by
    its `name` field, else `default_name`; `name_from_config`: a Hugging Face config's own name for its model comes
    before `default_name` (evo.zoo.model.load_model's, for a file named config.json)."""
    if fmt == "json":
        data = _load_json(text, file)
        if name_from_config and isinstance(data, dict):
            default_name = _config_name(data, default_name)
        return _from_hf(data, file, default_name or "model")
    if fmt == "yaml":
        return _from_yaml(_load_yaml(text, file), file, default_name or "model")
    raise ValueError(f"unknown model file format {fmt!r}; expected json or yaml")


def _load_json(text: str, file: str) -> Any:
    def unique(pairs: list[tuple[str, Any]]) -> dict:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ModelError(file, key, "given twice")
            out[key] = value
        return out

    def integer(text: str) -> int:
        try:
            limits.check_digits(text, "a JSON number")
        except limits.LimitError as e:
            raise ModelError(file, "", str(e)) from None
        return int(text)

    try:
        return json.loads(text, object_pairs_hook=unique, parse_int=integer)
    except json.JSONDecodeError as e:
        raise ModelError(file, "", f"is not valid JSON: line {e.lineno}, column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise ModelError(file, "", f"is nested deeper than {limits.MAX_DEPTH} levels") from None


def _load_yaml(text: str, file: str) -> Any:
    try:
        return limits.load_yaml_bounded(text, UniqueKeyLoader)
    except limits.LimitError as e:
        raise ModelError(file, "", str(e)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise ModelError(file, "", f"is not valid YAML: {where}{getattr(e, 'problem', None) or e}") from None


def _mapping(data: Any, file: str) -> dict:
    if not isinstance(data, dict):
        raise ModelError(file, "", f"expected a mapping of fields (hidden_size, ...); got {describe(data)}")
    return data


def _from_hf(data: Any, file: str, default_name: str) -> ModelSpec:
    d = _mapping(data, file)
    model_type = d.get("model_type", "")
    if not isinstance(model_type, str):
        raise ModelError(file, "model_type", f"expected text; got {describe(model_type)}")
    for key, what in _UNPLANNED_MOE.items():
        if d.get(key):
            raise ModelError(file, key, f"{what}; the plan would compute another model")
    if "rms_norm_eps" not in d and any(k in d for k in ("layer_norm_eps", "layer_norm_epsilon")):
        raise ModelError(file, "layer_norm_eps", "a LayerNorm model: evo has an rmsnorm operator only")
    act = d.get("hidden_act", "silu")
    if not isinstance(act, str) or act not in _HF_ACT:
        raise ModelError(file, "hidden_act", f"expected one of {', '.join(_HF_ACT)}; got {describe(act)}")
    if model_type in _GATED_GELU:
        raise ModelError(file, "model_type", f"{model_type!r}: evo's zoo plans Gemma 2 (gemma2) of the Gemma family")
    if model_type == "gemma2":
        return _build(gemma2_fields(d, file), file, default_name)
    for key, what in _UNPLANNED.items():
        if d.get(key) is not None:
            raise ModelError(file, key, f"{what}; the plan would compute another model"
                                        f"{' (this config names no model_type)' if not model_type else ''}")
    if model_type in _GATED and _HF_ACT[act] != "swiglu":
        raise ModelError(file, "hidden_act", f"{act!r} in a {model_type} config, whose MLP is gated (down(act(gate(x)) "
                                             "* up(x))): a GELU gate (GeGLU), which evo plans in Gemma 2's layer only "
                                             "(model_type gemma2); this family's with silu only (SwiGLU)")
    if model_type in _PLAIN and _HF_ACT[act] == "swiglu":
        raise ModelError(file, "hidden_act", f"{act!r} in a {model_type} config, whose MLP is not gated: evo plans "
                                             "silu in a gated MLP only (SwiGLU)")
    fields = {k: d[k] for k in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                                "head_dim", "vocab_size", "mlp_bias", "rms_norm_eps", "rope_theta")
              if d.get(k) is not None}
    fields["mlp"] = _HF_ACT[act]
    # Qwen2 puts a bias on Q, K and V without saying so in its config; an explicit attention_bias wins
    fields["attention_bias"] = d.get("attention_bias", model_type == "qwen2")
    if model_type == "qwen2_moe":  # its config names the bias qkv_bias (True by default)
        fields["attention_bias"] = d.get("qkv_bias", True)
    if d.get("attention_bias") is True and model_type != "qwen2":
        # Llama-family configs bias the output projection too, which the plan (gemm+residual) does not model
        raise ModelError(file, "attention_bias", f"in a {model_type or 'Llama-family'} config it biases o_proj as "
                                                 "well as Q, K and V; evo's zoo plans Q, K and V biases only")
    fields["tie_word_embeddings"] = d.get("tie_word_embeddings", True)  # PretrainedConfig's default
    if d.get("sliding_window") is not None and d.get("use_sliding_window") is not False:  # Qwen2 turns it off
        fields["sliding_window"] = d["sliding_window"]
    fields.update(_hf_experts(d, file))
    fields["quantization"] = read_quantization(d, file)
    fields["qk_norm"] = model_type in ("qwen3", "qwen3_moe")  # q_norm and k_norm in every attention (no config key)
    if model_type == "qwen3":  # Qwen3Config's head_dim is 128 unless given, not hidden_size / heads
        fields.setdefault("head_dim", 128)
    return _build(fields, file, default_name)


def _hf_experts(d: dict, file: str) -> dict:
    """The MoE fields of a Mixtral (num_local_experts) or Qwen-MoE (num_experts, moe_intermediate_size, a shared
    expert) config; {} for a dense one. A field that does not fit is one line naming it."""
    key = next((k for k in _MOE_KEYS if d.get(k)), None)
    if key is None:
        return {}
    experts = _size(d[key], key, file)
    if "num_experts_per_tok" not in d:
        raise ModelError(file, "num_experts_per_tok", f"missing: a model of {experts} experts routes each token to "
                                                      "how many?")
    top_k = d["num_experts_per_tok"]
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ModelError(file, "num_experts_per_tok", f"expected an integer from 1 to {key} ({experts}); got "
                                                      f"{describe(top_k)}")
    if d.get("decoder_sparse_step", 1) != 1 or d.get("mlp_only_layers"):
        field = "mlp_only_layers" if d.get("mlp_only_layers") else "decoder_sparse_step"
        raise ModelError(file, field, "some layers keep a dense MLP: evo's plan is one layer, every layer's MLP "
                                      "routed to experts")
    if d.get("mlp_bias"):
        raise ModelError(file, "mlp_bias", "biased experts: the moe operators take none")
    out = {"num_experts": experts, "experts_per_token": top_k}
    if d.get("moe_intermediate_size") is not None:  # Qwen-MoE: intermediate_size is the dense MLP's
        out["intermediate_size"] = d["moe_intermediate_size"]
    if d.get("shared_expert_intermediate_size"):
        out["shared_expert_size"] = d["shared_expert_intermediate_size"]
    if d.get("model_type") in ("qwen2_moe", "qwen3_moe"):  # Mixtral always renormalises; Qwen's config says
        out["norm_topk_prob"] = d.get("norm_topk_prob", False)
    return out


def _from_yaml(data: Any, file: str, default_name: str) -> ModelSpec:
    d = _mapping(data, file)
    for key in d:
        if key not in _YAML_KEYS:
            raise ModelError(file, str(key), f"unknown field; expected some of {', '.join(_YAML_KEYS)}")
    return _build(dict(d), file, default_name)


def _build(d: dict, file: str, default_name: str) -> ModelSpec:
    for key in _REQUIRED:
        if key not in d:
            raise ModelError(file, key, "missing (a required field)")
    name = d.get("name", default_name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ModelError(file, "name", f"expected letters, digits, '_', '-' or '.' (it names the experiments' "
                                       f"files and runs); got {describe(name)}")
    sizes = {k: _size(d[k], k, file) for k in _REQUIRED}
    heads = sizes["num_attention_heads"]
    kv_heads = _size(d.get("num_key_value_heads", heads), "num_key_value_heads", file)
    if heads % kv_heads:
        raise ModelError(file, "num_key_value_heads", f"{kv_heads} does not divide num_attention_heads ({heads})")
    if "head_dim" in d:
        head_dim = _size(d["head_dim"], "head_dim", file)
    elif sizes["hidden_size"] % heads:
        raise ModelError(file, "head_dim", f"missing, and hidden_size ({sizes['hidden_size']}) is not a multiple of "
                                           f"num_attention_heads ({heads}); give head_dim")
    else:
        head_dim = sizes["hidden_size"] // heads
    flags = {k: _flag(d.get(k, False), k, file)
             for k in ("tie_word_embeddings", "attention_bias", "mlp_bias", "qk_norm")}
    mlp = _choice(d.get("mlp", "swiglu"), "mlp", MLP_KINDS, file)
    if flags["mlp_bias"] and mlp in ("swiglu", "geglu"):  # gate and up would be biased: the gated ops take no bias
        raise ModelError(file, "mlp_bias", f"a gated MLP ({mlp}) with biases: the fused gated ops take no bias yet")
    norm = _choice(d.get("norm", "rmsnorm"), "norm", NORMS, file)
    gemma = gemma_checked(d, mlp, norm, d.get("num_experts", 0), file)
    eps = _positive(d.get("rms_norm_eps", 1e-6), "rms_norm_eps", 0.1, file)
    window = d.get("sliding_window", 0)
    window = 0 if window == 0 and not isinstance(window, bool) else _size(window, "sliding_window", file)
    theta = _positive(d.get("rope_theta", 10000.0), "rope_theta", 1e12, file)
    quantization = _choice(d.get("quantization", ""), "quantization", QUANTIZATIONS, file)
    return ModelSpec(name=name, num_key_value_heads=kv_heads, head_dim=head_dim,
                     norm=norm, mlp=mlp, **gemma, rms_norm_eps=eps, rope_theta=theta, sliding_window=window, **sizes,
                     **flags, **_experts(d, mlp, flags["mlp_bias"], file), quantization=quantization)


def _experts(d: dict, mlp: str, mlp_bias: bool, file: str) -> dict:
    """num_experts, experts_per_token and shared_expert_size checked: all 0 (a dense MLP), or experts routed top-k
    (1 <= k <= experts) in a SwiGLU MLP without biases."""
    experts = d.get("num_experts", 0)
    if experts == 0 and not isinstance(experts, bool):
        for key in ("experts_per_token", "shared_expert_size", "norm_topk_prob"):
            if d.get(key):
                raise ModelError(file, key, "given without num_experts: a dense MLP has no experts")
        return {}
    experts = _size(experts, "num_experts", file)
    top_k = d.get("experts_per_token")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= experts:
        raise ModelError(file, "experts_per_token", f"expected an integer from 1 to num_experts ({experts}); got "
                                                    f"{describe(top_k)}")
    if mlp != "swiglu" or mlp_bias:
        raise ModelError(file, "mlp", "experts run SwiGLU without biases (moe_gate_up, moe_down); got "
                                      f"{mlp}{' with biases' if mlp_bias else ''}")
    shared = d.get("shared_expert_size", 0)
    shared = 0 if shared == 0 and not isinstance(shared, bool) else _size(shared, "shared_expert_size", file)
    return {"num_experts": experts, "experts_per_token": top_k, "shared_expert_size": shared,
            "norm_topk_prob": _flag(d.get("norm_topk_prob", True), "norm_topk_prob", file)}


def _size(value: Any, field: str, file: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
        raise ModelError(file, field, f"expected a positive integer up to {MAX_SIZE}; got {describe(value)}")
    return value


def _positive(value: Any, field: str, high: float, file: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= high:
        raise ModelError(file, field, f"expected a number above 0 and at most {high:g}; got {describe(value)}")
    return float(value)


def _flag(value: Any, field: str, file: str) -> bool:
    if not isinstance(value, bool):
        raise ModelError(file, field, f"expected true or false; got {describe(value)}")
    return value


def _choice(value: Any, field: str, choices: tuple[str, ...], file: str) -> str:
    if value not in choices:
        raise ModelError(file, field, f"expected one of {', '.join(choices)}; got {describe(value)}")
    return value

