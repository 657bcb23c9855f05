"""`python -m evo.bench.generate ZOO_MODULE MODEL_CONFIG`: model.generate() tokens per second, four ways.

ZOO_MODULE is the file `evo zoo MODEL --collect` writes, MODEL_CONFIG a Hugging Face config.json of a family
evo.zoo.hf_patch serves (Llama, Qwen2, Qwen3, Mistral, Phi-3). The model is built from the config with seeded random
weights (nothing downloaded; `--layers N` keeps its first N layers), then a seeded prompt of `--prompt` tokens
(2048) is given to generate() for `--new-tokens` (128) decode steps, greedy, four ways:

- `eager`: transformers as it comes (a dynamic cache, no compile);
- `compile`: transformers' recipe for speed: a static cache and torch.compile of the decode step with CUDA graphs
  (CompileConfig(fullgraph=True, mode="reduce-overhead"); transformers never compiles the prefill);
- `zoo_eager`, `zoo_compile`: the same with the model patched by evo.api.patch_model (the zoo's kernels where it
  measured them; its report line is recorded).

Per way: the prefill (a generate() of one token: the prompt's forward pass) and the decode steps (the rest of a
generate() of new_tokens + 1 tokens), medians of `--reps` runs after warm-up runs (compile and graph capture
happen there), as milliseconds and tokens per second; then one more run keeps its logits, which are checked
against eager's (evo.bench.generate_results says how). Writes `OUT/generate.json` and `OUT/generate.md` after
every way (the GPU named) and prints the table last; exit status 1 when a zoo way's logits are outside the
tolerance, 2 for bad input (one line). Without a GPU it refuses unless `--device cpu`: then the eager ways only,
the zoo's kernels in Triton's interpreter (what the tests run on a tiny config).

`--weights fp8` (by default where the zoo holds the fp8_* roles of `evo zoo MODEL --dtype fp8`): the model's
projections are quantized by evo.zoo.hf_fp8.quantize_model_fp8 before any way runs (every way then has FP8 weights;
torch's FP8 linears use torch._scaled_mm where it runs), and the tolerance is at least the FP8 model's own error
against the model before quantization (its prompt's last logits, `fp8_quantization_error`): two correct FP8 models
differ by more than rounding, a difference before a quantization step flipping e4m3 roundings after it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from evo.bench.generate_results import WAYS, ZOO_WAYS, goals, to_markdown, write_generate
from evo.experiment.oneline import one_line

__all__ = ["TOLERANCE", "SLACK", "allowed", "build_parser", "build_model", "run_way", "main"]

# ||logits - eager's|| / ||eager's||, over a whole model's depth (a layer's own bf16 tolerance is 1.5e-2); fp32: the
# GPU's tl.dot rounds fp32 operands to tf32
TOLERANCE = {"bf16": 5e-2, "fp16": 1e-2, "fp32": 1e-2}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
NEEDS_CUDA = "needs CUDA (torch.compile with CUDA graphs)"
WARMUP = {"eager": 1, "compile": 3, "zoo_eager": 1, "zoo_compile": 3}  # compile, then CUDA graphs record


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evo.bench.generate", description=__doc__.split("\n\n")[0])
    p.add_argument("zoo_module", metavar="ZOO_MODULE", help="the module `evo zoo MODEL --collect` wrote")
    p.add_argument("model", metavar="MODEL_CONFIG",
                   help="a Hugging Face config.json (llama, qwen2, qwen3, mistral, phi3; gemma2: its attention "
                        "patched)")
    p.add_argument("--prompt", type=int, default=2048, help="prompt tokens: the prefill [2048]")
    p.add_argument("--new-tokens", type=int, default=128, help="decode steps after the prefill [128]")
    p.add_argument("--layers", type=int, default=None, help="keep the first N decoder layers [the config's]")
    p.add_argument("--dtype", default="bf16", choices=tuple(DTYPES), help="[bf16]")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: the eager ways only, the zoo's kernels in the Triton interpreter (tests) [cuda]")
    p.add_argument("--reps", type=int, default=3, help="timed runs per way, the median kept [3]")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the prompt [0]")
    p.add_argument("--out", default="reports/bench/generate", help="folder for generate.json and .md")
    p.add_argument("--weights", default="auto", choices=("auto", "bf16", "fp8"),
                   help="fp8: the model's projections quantized to FP8 first (auto: where the zoo holds fp8_* roles)")
    return p


def hf_config(path: str, layers: int | None) -> tuple[Any, str]:
    """The transformers config of a config.json (its depth cut to `layers`) and the model's name; ValueError names
    what is wrong."""
    from evo.zoo import load_model
    from evo.zoo.hf_patch import FAMILIES

    name = load_model(path).name  # evo's checks of the file (one line each), and its name
    data = json.loads(Path(path).read_text())
    kind = data.get("model_type")
    if kind not in FAMILIES:
        raise ValueError(f"{path}: model_type {kind!r}: the patch serves {', '.join(FAMILIES)}")
    depth = data.get("num_hidden_layers")
    if not isinstance(depth, int) or depth < 1:
        raise ValueError(f"{path}: num_hidden_layers: expected a positive integer; got {depth!r}")
    if layers is not None:
        if not 1 <= layers <= depth:
            raise ValueError(f"--layers {layers}: the config has {depth} layers; give 1 to {depth}")
        data["num_hidden_layers"] = layers
        if isinstance(data.get("layer_types"), list):
            data["layer_types"] = data["layer_types"][:layers]
    from transformers import AutoConfig

    return AutoConfig.for_model(**data), name


def build_model(config: Any, dtype: str, device: str, seed: int) -> Any:
    """The causal LM of `config` with seeded random weights, made on `device`, in eval mode, greedy to the end
    (no end-of-sequence token stops it early)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, DTYPES[dtype]))
    model.eval().requires_grad_(False)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _generator(model: Any, ids: Any, way: str, new_tokens: int) -> Any:
    """generate(ids, n, **extra) as `way` runs it: the compiled ways with one static cache of room for the longest
    run (reset before each, so every run replays the same graphs)."""
    import torch
    from transformers import CompileConfig, StaticCache

    compiled = way.endswith("compile")
    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + new_tokens + 1) if compiled else None
    config = CompileConfig(fullgraph=True, dynamic=False, mode="reduce-overhead") if compiled else None

    def run(n: int, **extra: Any) -> Any:
        kw: dict[str, Any] = {"cache": cache, "compile_config": config} if compiled else {"disable_compile": True}
        if cache is not None:
            cache.reset()
        with torch.no_grad():
            return model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, **kw, **extra)

    return run


def run_way(model: Any, ids: Any, way: str, new_tokens: int, reps: int, device: str) -> dict[str, Any]:
    """One way's times (ms, tokens/s) and its last run's generated tokens and logits (`_tokens`, `_logits`). A
    compiled way starts from an empty Dynamo cache: generate() compiles the model's `forward`, one code object for
    every way, so an earlier way's compiled entry would stay first in its cache and have its guards checked (and
    fail) before every decode step of this one (seen on an H200: 0.95 ms of guard checks per step, against 0.31)."""
    if way.endswith("compile"):
        import torch

        torch._dynamo.reset()
    gen = _generator(model, ids, way, new_tokens)
    for _ in range(WARMUP[way]):
        gen(new_tokens + 1)
    prefill, full = [], []
    for _ in range(reps):  # interleaved, so both see the same state of the GPU
        for n, times in ((1, prefill), (new_tokens + 1, full)):
            _sync(device)
            start = time.perf_counter()
            gen(n)
            _sync(device)
            times.append(time.perf_counter() - start)
    pre, whole = statistics.median(prefill), statistics.median(full)
    out = gen(new_tokens + 1, output_logits=True, return_dict_in_generate=True)
    decode = max(whole - pre, 1e-9) / new_tokens
    return {"prefill_ms": round(pre * 1e3, 4), "prefill_tok_s": round(ids.shape[1] / pre, 1),
            "decode_ms_per_token": round(decode * 1e3, 4), "decode_tok_s": round(1 / decode, 1),
            "generate_s": round(whole, 4), "failure": None,
            "_tokens": out.sequences[0, ids.shape[1]:].tolist(), "_logits": [t.float() for t in out.logits]}


def _check(row: dict[str, Any], ref: dict[str, Any], tolerance: float) -> None:
    """The way's logits against eager's, over the steps whose inputs agree (see evo.bench.generate_results);
    `tolerance` is the larger of the dtype's and SLACK times torch.compile's own error (see `allowed`)."""
    tokens, ref_tokens = row["_tokens"], ref["_tokens"]
    agree = next((i for i, (a, b) in enumerate(zip(tokens, ref_tokens, strict=True)) if a != b), len(tokens))
    steps = min(agree + 1, len(tokens))
    err = max(float((row["_logits"][i] - ref["_logits"][i]).norm() / ref["_logits"][i].norm()) for i in range(steps))
    row.update(logits_rel_error=round(err, 6), steps_compared=steps, tokens_agree=agree,
               within_tolerance=err <= tolerance, tolerance=round(tolerance, 6))


SLACK = 1.25  # a zoo way may differ from eager by this times what torch.compile's own way does


def allowed(tolerance: float, compiled: dict[str, Any] | None) -> float:
    """The logits error a way may have: the dtype's tolerance, or SLACK times torch.compile's own error against
    eager where that is larger (bf16 over 32 random layers: torch.compile's own way differed by 0.064 on an H200, over
    the 0.05 of the dtype's tolerance), so the check measures evo's kernels, not the depth of the model."""
    error = (compiled or {}).get("logits_rel_error")
    return max(tolerance, SLACK * error) if isinstance(error, (int, float)) else tolerance


def _public(ways: dict[str, Any]) -> dict[str, Any]:
    return {w: {k: v for k, v in r.items() if not k.startswith("_")} for w, r in ways.items()}


def _refuse(message: str) -> int:
    print(f"evo generate bench: {one_line(message)}", file=sys.stderr)
    return 2


def _quantize(model: Any, ids: Any) -> float:
    """Quantize `model`'s projections to FP8 in place (evo.zoo.hf_fp8); returns the relative error of the prompt's
    last logits against the model's before."""
    import torch

    from evo.zoo.hf_fp8 import quantize_model_fp8

    with torch.no_grad():
        before = model(ids).logits[:, -1].float()
        quantize_model_fp8(model)
        after = model(ids).logits[:, -1].float()
    return float((after - before).norm() / before.norm())


def _setup(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    """The config, the model's name and the zoo's ops; ValueError (LoadError too) names what is wrong."""
    for flag, value in (("--prompt", args.prompt), ("--new-tokens", args.new_tokens), ("--reps", args.reps)):
        if value < 1:
            raise ValueError(f"{flag} must be at least 1; got {value}")
    from evo.api import load_zoo

    ops = load_zoo(args.zoo_module)
    from evo.zoo.fp8_problems import FP8_ROLES

    fp8_roles = sorted(set(ops) & set(FP8_ROLES))
    if args.weights == "auto":
        args.weights = "fp8" if fp8_roles else "bf16"
    if args.weights == "fp8" and not fp8_roles:
        raise ValueError(f"--weights fp8: {args.zoo_module} holds no fp8_* role (a zoo of `evo zoo MODEL --dtype fp8` "
                         "does)")
    if args.weights == "bf16" and fp8_roles:
        raise ValueError(f"--weights bf16: {args.zoo_module} is an FP8 zoo ({', '.join(fp8_roles)}): --weights fp8")
    config, name = hf_config(args.model, args.layers)
    limit = getattr(config, "max_position_embeddings", None)
    if limit and args.prompt + args.new_tokens + 1 > limit:
        raise ValueError(f"--prompt {args.prompt} + --new-tokens {args.new_tokens} passes the model's "
                         f"{limit} positions")
    return config, name, ops


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m evo.bench.generate ARGS`; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.device == "cpu":
        from evo.launch.interpreter import NoDevice, use_interpreter_without_gpu

        try:
            use_interpreter_without_gpu()
        except NoDevice as e:
            return _refuse(str(e))
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        return _refuse("it times generate() on a CUDA GPU and none is visible here (--device cpu runs the eager "
                       "ways only)")
    try:
        config, name, ops = _setup(args)
    except (ValueError, OSError) as e:
        return _refuse(str(e))
    from evo.bench.entrants import versions
    from evo.zoo.hf_patch import patch_model, unpatch_model

    model = build_model(config, args.dtype, args.device, args.seed)
    ids = torch.randint(3, config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(args.seed))
    ids = ids.to(args.device)
    tolerance = TOLERANCE[args.dtype]
    quantization = _quantize(model, ids) if args.weights == "fp8" else None
    tolerance = tolerance if quantization is None else max(tolerance, quantization)
    import transformers

    doc: dict[str, Any] = {
        "model": name, "config": str(Path(args.model).resolve()), "device": args.device,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "versions": {**versions(), "transformers": transformers.__version__}, "dtype": args.dtype,
        "layers": config.num_hidden_layers, "config_layers": json.loads(Path(args.model).read_text())[
            "num_hidden_layers"], "prompt_tokens": args.prompt, "new_tokens": args.new_tokens, "reps": args.reps,
        "seed": args.seed, "zoo_module": str(Path(args.zoo_module).resolve()), "tolerance": tolerance, "ways": {},
        "weights": args.weights, **({} if quantization is None else {"fp8_quantization_error": quantization})}
    ways: dict[str, dict[str, Any]] = {}
    for way in WAYS:
        if way in ZOO_WAYS and "patch" not in doc:
            report = patch_model(model, ops, quiet=True)
            doc.update(patch=report.line(), served={r: list(v) for r, v in report.served.items()}, kept=report.kept,
                       torch_at={r: list(t) for r, t in report.torch_at.items()})  # the zoo's baseline T: torch
            print(report.line(), file=sys.stderr)
            if not report.served:
                return _refuse(f"{args.zoo_module} serves none of {name}'s roles: {report.line()}")
        if way.endswith("compile") and args.device != "cuda":
            ways[way] = {"failure": NEEDS_CUDA}
        else:
            try:
                ways[way] = run_way(model, ids, way, args.new_tokens, args.reps, args.device)
            except Exception as e:  # a compile or capture error, out of memory: recorded, the other ways go on
                ways[way] = {"failure": one_line(f"{type(e).__name__}: {e}")[:300]}
        if "eager" in ways and not ways["eager"].get("failure") and not ways[way].get("failure"):
            _check(ways[way], ways["eager"], allowed(tolerance, ways.get("compile")))
        doc["ways"], doc["goals"] = _public(ways), goals(_public(ways), timed=args.device == "cuda")
        json_path, _ = write_generate(doc, args.out)
        r = doc["ways"][way]
        print(f"{way}: " + (f"failed: {r['failure']}" if r.get("failure") else
                            f"prefill {r['prefill_ms']:.4g} ms ({r['prefill_tok_s']:.5g} tok/s), decode "
                            f"{r['decode_ms_per_token']:.4g} ms/token ({r['decode_tok_s']:.5g} tok/s), logits error "
                            f"{r.get('logits_rel_error')}"), file=sys.stderr)
    unpatch_model(model)
    print(to_markdown(doc), end="")
    over = [w for w in ZOO_WAYS if doc["ways"][w].get("within_tolerance") is False]
    if over:
        limit = allowed(tolerance, doc["ways"].get("compile"))
        print(f"evo generate bench: the logits of {', '.join(over)} are outside the tolerance {limit:g} (see "
              f"{json_path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
