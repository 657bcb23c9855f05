"""The generate benchmark's files (evo.bench.generate): `generate.json` and a markdown table `generate.md` beside it.

    {"model": "llama-3-8b", "gpu": "NVIDIA H100 80GB HBM3", "device": "cuda", "versions": {...}, "dtype": "bf16",
     "layers": 32, "config_layers": 32, "prompt_tokens": 2048, "new_tokens": 128, "reps": 3,
     "zoo_module": ".../llama-3-8b_kernels.py", "patch": "evo patch: LlamaForCausalLM (32 layers, bf16): ...",
     "served": {"qkv": ["gemm", [1, 2048]], ...}, "kept": {"sampling_softmax": "..."}, "tolerance": 0.05,
     "ways": {"eager": {"prefill_ms": ..., "prefill_tok_s": ..., "decode_ms_per_token": ..., "decode_tok_s": ...,
                        "generate_s": ..., "logits_rel_error": 0.0, "steps_compared": 129, "tokens_agree": 129,
                        "within_tolerance": true, "failure": null}, "compile": {...}, "zoo_eager": {...},
              "zoo_compile": {...}},
     "goals": {"decode": {"ratio": ..., "goal": 1.2, "met": ...}, "prefill": {"ratio": ..., "goal": 1.1, "met": ...}}}

`prefill_ms` is a generate() of one new token (the prompt's forward pass and one token chosen), `decode_ms_per_token`
the rest of a generate() of `new_tokens` + 1 tokens over `new_tokens` (medians over `reps`). The logits error is
the largest ||logits - eager's|| / ||eager's|| over the steps up to and including the first token a way chose
differently (from there its steps see other inputs), `tokens_agree` how many tokens it chose as eager did.
Goals (issue 41): decode tokens/s with the zoo (its better way) >= 1.2x transformers + torch.compile with a static
cache and CUDA graphs; prefill >= 1.1x the better of transformers' two ways.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evo.store.atomic_file import write_atomic

__all__ = ["WAYS", "ZOO_WAYS", "GOALS", "goals", "write_generate", "to_markdown"]

WAYS = ("eager", "compile", "zoo_eager", "zoo_compile")
ZOO_WAYS = ("zoo_eager", "zoo_compile")
GOALS = {"decode": 1.2, "prefill": 1.1}
WAY_TEXT = {"eager": "transformers eager (dynamic cache)",
            "compile": "transformers + torch.compile, static cache, CUDA graphs (reduce-overhead)",
            "zoo_eager": "+ evo's zoo (eager, dynamic cache)",
            "zoo_compile": "+ evo's zoo and torch.compile (static cache, CUDA graphs)"}


def _best(ways: dict[str, Any], names: tuple[str, ...], key: str) -> float | None:
    values = [ways[w][key] for w in names if w in ways and ways[w].get(key)]
    return max(values) if values else None


def goals(ways: dict[str, Any], timed: bool = True) -> dict[str, Any]:
    """The issue's two ratios: the zoo's better decode tokens/s over compile's, its better prefill tokens/s over
    transformers' better one (None where a side did not run, and everywhere when not `timed`: the CPU)."""
    if not timed:
        return {name: {"ratio": None, "goal": goal, "met": None} for name, goal in GOALS.items()}
    out = {}
    for name, key, base in (("decode", "decode_tok_s", ("compile",)), ("prefill", "prefill_tok_s",
                                                                       ("eager", "compile"))):
        zoo, torch_ = _best(ways, ZOO_WAYS, key), _best(ways, base, key)
        ratio = round(zoo / torch_, 3) if zoo and torch_ else None
        out[name] = {"ratio": ratio, "goal": GOALS[name], "met": None if ratio is None else ratio >= GOALS[name]}
    return out


def write_generate(doc: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """Write `generate.json` and `generate.md` under `out_dir` atomically; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "generate.json", json.dumps(doc, indent=1) + "\n")
    write_atomic(out / "generate.md", to_markdown(doc))
    return out / "generate.json", out / "generate.md"


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def to_markdown(doc: dict[str, Any]) -> str:
    v = doc.get("versions", {})
    lines = [f"# generate(): {doc['model']} on {doc['gpu']}", "",
             f"{doc['layers']} of {doc['config_layers']} layers, {doc['dtype']}, random weights (seed {doc['seed']}); "
             f"a prompt of {doc['prompt_tokens']} tokens, then {doc['new_tokens']} decode steps, greedy; median of "
             f"{doc['reps']} runs. torch {v.get('torch', '?')}, triton {v.get('triton', '?')}, transformers "
             f"{v.get('transformers', '?')}.", "",
             f"Zoo: `{doc['zoo_module']}`", ""]
    if doc.get("weights") == "fp8":  # evo.bench.generate --weights fp8
        lines += [f"FP8 weights (every way): the projections e4m3 with per-channel scales (evo.zoo.hf_fp8); the FP8 "
                  f"model's own error against the model before quantization, {doc.get('fp8_quantization_error', 0):.3g}"
                  ", is the least tolerance.", ""]
    if doc.get("device") != "cuda":
        lines += ["NOT a timing: on the CPU the zoo's kernels run in Triton's interpreter (a check of the flow).", ""]
    lines += [f"`{doc.get('patch', 'not patched yet')}`", "",
            "| way | prefill ms | prefill tok/s | decode ms/token | decode tok/s | logits error | tokens as eager |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for way in WAYS:
        r = doc["ways"].get(way)
        if r is None:
            continue
        if r.get("failure"):
            lines.append(f"| {way} | failed: {r['failure']} | | | | | |")
            continue
        err = _num(r.get("logits_rel_error"), 3) + ("" if r.get("within_tolerance", True) else " (over)")
        lines.append(f"| {way} | {_num(r['prefill_ms'])} | {_num(r['prefill_tok_s'])} | "
                     f"{_num(r['decode_ms_per_token'])} | {_num(r['decode_tok_s'])} | {err} | "
                     f"{r.get('tokens_agree', '-')}/{doc['new_tokens'] + 1} |")
    lines += ["", "Ways: " + "; ".join(f"`{w}` {t}" for w, t in WAY_TEXT.items()) + ".",
              f"Logits error: relative to eager's, tolerance {doc['tolerance']:g} for the zoo's ways, or 1.25 times "
              "torch.compile's own error where that is larger (the depth of the model, not evo's kernels).", ""]
    for name, g in doc.get("goals", {}).items():
        state = "not measured" if g["ratio"] is None else f"{g['ratio']:.3f}x, " + ("met" if g["met"] else "not met")
        lines.append(f"- {name}: zoo / transformers {state} (goal {g['goal']}x)")
    return "\n".join(lines) + "\n"
