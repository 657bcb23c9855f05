"""`python -m evo.bench.zoo_layer ZOO_MODULE MODEL`: a whole decoder layer with the zoo's kernels against PyTorch.

ZOO_MODULE is the file `evo zoo MODEL --collect` writes (`DIR/<model>/<model>_kernels.py`), MODEL the model file the
zoo was planned from. For each token count T: the reference layer of the model's kind (evo.zoo.layers: Llama-style,
Mixture-of-Experts or Gemma 2, seeded weights; evo.bench.zoo_layer_kind: `--experts`, `--layer-index`, and the
line saying what runs the zoo's kernels and what torch) and the same layer with the zoo's roles patched in
(evo.zoo.patch), on the same seeded input x [T, hidden], four
ways: `eager` (the plain layer), `compile` (torch.compile of it, max-autotune-no-cudagraphs, fullgraph),
`zoo_eager` (the patched layer) and `zoo_compile` (torch.compile of the patched layer), each on two clocks of
evo.evaluate.clocks: back-to-back eager calls (`call_ms`) and CUDA-graph replay (`graph_ms`). Each way's output
is checked against the plain eager layer's. A way that fails (a compile error, a capture error) is recorded with
its reason. Writes `OUT/zoo.json` and `OUT/zoo.md` (evo.bench.zoo_layer_results) after every token count and
prints the table last; exit status 1 when an output is outside its tolerance.

Per token count the row also holds the layer's floor (evo.bench.zoo_floor): `floor` (the bytes a fused layer moves at
the least: weights, KV cache, input and output; over the copy bandwidth measured once at the start of this run,
`copy_GBps` in the document; and the compute floor at the dense peak) and `floor_share` (each way's time key -> the
HBM floor over that time).

`--decode-steps N`: then N decode steps of one token after the context, four ways, per call and under ONE CUDA graph
replayed for every step (evo.bench.zoo_decode: a fixed-capacity KV cache whose length is a device tensor), as
`decode` in zoo.json and a section of zoo.md; exit status 1 also when its output is outside the tolerance.

Without a GPU it refuses in one line (exit status 2) unless `--device cpu` is given: then only the eager ways
run (the zoo's kernels in the Triton interpreter, as the tests do), compile and graphs recorded as needing CUDA.

`--weights fp8` (by default whenever the zoo module holds the fp8_* roles of `evo zoo MODEL --dtype fp8`): the layer
has FP8 weights (evo.zoo.layer_fp8; `--dtype` is then the activations'), torch running its FP8 GEMMs by
torch._scaled_mm where it runs, else dequantize + matmul (the layer's line says which). The model is named
<model>-fp8, as the FP8 zoo is. The floor counts the e4m3 weights and their scales, and the FP8 peak.

Tolerances (evo.bench.zoo_tolerance): the dtype's; an FP8 layer's at least its own error against the bf16 layer of
the same seed (`fp8_quantization_error` in the row); a MoE layer's tokens whose routing is a near tie
(`routing_near_ties` in the row, counted) left out of every way's comparison, the others held to the dtype's.

`--profile`: after all the timings, where each token count's time goes (evo.bench.zoo_profile): torch.profiler
over a few calls of each way that ran (its call path, as the call clock times it) and, on a GPU, over a CUDA graph's
replay of `compile` and `zoo_compile` (as `compile_graph`, `zoo_compile_graph`). Each layer row of zoo.json gets
`profile`: way -> {kernel_us_per_call, call_us (the bench's own clock), buckets: evo / gemm / attention / norm /
elementwise/other -> us, kernels: the 15 largest by name with us and count per call, the rest as "other"}, and
`profile_failures`: way -> one-line reason (a profile that fails never stops the bench); zoo.md gets a section
"Where the time goes" and stderr a table per T. On the CPU the "kernels" are the top-level operators.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from evo.bench.entrants import versions
from evo.bench.zoo_decode import measure_decode
from evo.bench.zoo_floor import floor_shares, layer_floor
from evo.bench.zoo_layer_kind import EXPERT_CHOICES, build_layers, layer_note, pick_experts
from evo.bench.zoo_layer_results import WAYS, to_markdown, write_zoo
from evo.bench.zoo_profile import EVO_KERNELS, bucket_table, evo_kernel_names, profile_calls, profile_graph
from evo.bench.zoo_tolerance import TOLERANCE, fp8_quantization_error, reference_and_ties
from evo.experiment.oneline import one_line

__all__ = ["TOLERANCE", "build_parser", "measure_layer", "profile_layer", "main"]

COMPILE_MODE = "max-autotune-no-cudagraphs"  # CUDA graphs are the graph clock's to add, not Inductor's
NEEDS_CUDA = "needs CUDA"
PROFILE_CALLS = 5  # profiled calls per way, after one unprofiled warm-up call
GRAPH_WAYS = ("compile", "zoo_compile")  # also profiled through a CUDA graph's replay (the graph clock's path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m evo.bench.zoo_layer", description=__doc__.split("\n\n")[0])
    p.add_argument("zoo_module", metavar="ZOO_MODULE", help="the module `evo zoo MODEL --collect` wrote")
    p.add_argument("model", metavar="MODEL", help="the model file (Hugging Face config.json or evo's YAML)")
    p.add_argument("--tokens", default="1,16,128,2048", help="token counts T, comma-separated [1,16,128,2048]")
    p.add_argument("--dtype", default="bf16", help="fp16, bf16 or fp32 [bf16]")
    p.add_argument("--out", default="reports/bench/zoo", help="folder for zoo.json and zoo.md [reports/bench/zoo]")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                   help="cpu: the eager ways only, zoo kernels in the Triton interpreter (tests) [cuda]")
    p.add_argument("--rounds", type=int, default=7, help="rounds of the per-call clock (fastest kept) [7]")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights; the input of T uses seed + T [0]")
    p.add_argument("--context", type=int, default=0,
                   help="tokens in the layer's KV cache, as `evo zoo --context` planned the zoo [0]")
    p.add_argument("--profile", action="store_true",
                   help="after all the timings, each way's kernels by name and bucket (torch.profiler) into zoo.json")
    p.add_argument("--decode-steps", type=int, default=0, metavar="N",
                   help="also N decode steps of one token after the context, per call and under one CUDA graph "
                        "replayed every step (e.g. 128 with --context 4096) [0: none]")
    p.add_argument("--experts", default="auto", choices=EXPERT_CHOICES,
                   help="a MoE layer's experts in torch: transformers 5's eager loop or torch._grouped_mm (auto: "
                        "grouped_mm on a GPU where torch has it) [auto]")
    p.add_argument("--layer-index", type=int, default=0, metavar="I",
                   help="which Gemma-2 layer: 0 slides (a window), 1 attends to every key [0]")
    p.add_argument("--gemma-attention", default="eager", choices=("eager", "flex"),
                   help="a Gemma-2 layer's attention in torch: transformers' eager path or FlexAttention [eager]")
    p.add_argument("--weights", default="auto", choices=("auto", "bf16", "fp8"),
                   help="the projections' weights: fp8 (e4m3, per-channel scales; --dtype the activations') or the "
                        "activations' dtype; auto: fp8 where the zoo holds fp8_* roles [auto]")
    return p


def _reason(e: BaseException) -> str:
    return one_line(f"{type(e).__name__}: {e}")[:300]


def _compiled(module: Any) -> Callable[..., Any]:
    import torch

    return torch.compile(module, mode=COMPILE_MODE, dynamic=False, fullgraph=True)


def _capture_error(fn: Callable[[], Any]) -> str:
    """Why `fn` cannot be captured in a CUDA graph (graph_ms only says that it cannot)."""
    import torch

    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            fn()
    except Exception as e:  # the reason is the point: any error of the capture
        torch.cuda.synchronize()
        return _reason(e)
    return "CUDA graph capture failed while timing"


def _input(plain: Any, tokens: int, dtype: str, device: str, seed: int) -> Any:
    """The seeded input x [T, hidden] of token count T."""
    import torch

    from evo.problem import DTYPES

    gen = torch.Generator().manual_seed(seed + tokens)
    return torch.randn(tokens, plain.spec.hidden_size, generator=gen).to(getattr(torch, DTYPES[dtype])).to(device)


def _modules(plain: Any, patched: Any, cuda: bool) -> dict[str, Any]:
    """Way -> the module it calls (None: the way needs CUDA); the compiled ways compile afresh at their first call."""
    import torch

    if cuda:
        torch._dynamo.reset()  # each T compiles afresh, as operators/gemm/baselines.py does per shape
    return {"eager": plain, "compile": _compiled(plain) if cuda else None,
            "zoo_eager": patched, "zoo_compile": _compiled(patched) if cuda else None}


def measure_layer(plain: Any, patched: Any, tokens: int, dtype: str, device: str, seed: int = 0,
                  rounds: int = 7, tolerance: float | None = None) -> dict[str, Any]:
    """One token count's row of zoo.json: the eight times, the errors against the plain eager layer, failures;
    `tolerance` (default: the dtype's) bounds the errors."""
    import torch

    from evo.evaluate.check import relative_error
    from evo.evaluate.clocks import call_ms, graph_ms

    cuda = device == "cuda"
    x = _input(plain, tokens, dtype, device, seed)
    row: dict[str, Any] = {"tokens": tokens}
    failures: dict[str, str] = {}
    fns: dict[str, Callable[[], Any]] = {}
    errors: dict[str, float] = {}
    modules = _modules(plain, patched, cuda)
    tolerance = TOLERANCE[dtype] if tolerance is None else tolerance
    ref, ties = reference_and_ties(plain, x, TOLERANCE[dtype])  # MoE: tokens either expert may take, left out
    rows = slice(None) if ties is None else ~ties
    with torch.no_grad():
        for way in WAYS:
            module = modules[way]
            if module is None:
                failures[way] = NEEDS_CUDA
                continue
            try:
                out = module(x)  # a compiled way compiles here
                if cuda:
                    torch.cuda.synchronize()
            except Exception as e:  # a way that fails is recorded and the others still run
                failures[way] = _reason(e)
                continue
            fns[way] = lambda m=module: m(x)
            if way != "eager":
                errors[way] = relative_error(out[rows], ref[rows])
        ways = list(fns)
        try:
            per_call = call_ms([fns[w] for w in ways], rounds=rounds, device=device)
        except Exception:  # a way that ran once but fails when repeated: time the others alone
            per_call = []
            for w in ways:
                try:
                    per_call += call_ms([fns[w]], rounds=rounds, device=device)
                except Exception as again:
                    failures[w] = _reason(again)
                    per_call.append(None)
        graphs = graph_ms([fns[w] for w in ways], device=device) if cuda else [None] * len(ways)
    for w, ms, g in zip(ways, per_call, graphs, strict=True):
        row[f"{w}_ms"] = ms
        row[f"{w}_graph_ms"] = g
        if g is None and w not in failures:
            failures[f"{w}_graph"] = _capture_error(fns[w]) if cuda else NEEDS_CUDA
    for w in WAYS:
        row.setdefault(f"{w}_ms", None)
        row.setdefault(f"{w}_graph_ms", None)
        if w not in fns and f"{w}_graph" not in failures:
            failures[f"{w}_graph"] = NEEDS_CUDA if not cuda else f"{w} failed"
    row["errors"] = errors
    row["max_rel_error"] = max(errors.values()) if errors else None
    row["tolerance"] = tolerance
    if ties is not None:
        row["routing_near_ties"] = int(ties.sum())
    row["within_tolerance"] = row["max_rel_error"] is None or row["max_rel_error"] <= row["tolerance"]
    row["failures"] = failures
    return row


def profile_layer(plain: Any, patched: Any, row: dict[str, Any], dtype: str, device: str, seed: int = 0,
                  evo_names: frozenset[str] = EVO_KERNELS) -> None:
    """Add `profile` (way -> its kernels per call beside the bench's time of it) and `profile_failures` (way -> one
    line) to a token count's row, for each way that ran its timings and, on a GPU, compile's and zoo_compile's
    graph replays (`compile_graph`, `zoo_compile_graph`). Run it after all token counts' timings: once the profiler
    has run, CUPTI stays attached and launches cost more (a layer call 1.19 -> 1.28 ms, a small kernel's 9.4 ->
    12.7 us; H100, torch 2.11, 2026-11-25), so the compiled ways compile again here (Inductor's caches make that
    quick)."""
    import torch

    cuda = device == "cuda"
    x = _input(plain, row["tokens"], dtype, device, seed)
    modules = _modules(plain, patched, cuda)
    ran = [w for w in WAYS if modules[w] is not None and w not in row["failures"]]
    runs = [(w, w, False) for w in ran] + [(f"{w}_graph", w, True) for w in GRAPH_WAYS if cuda and w in ran]
    row["profile"], row["profile_failures"] = {}, {}
    with torch.no_grad():
        for name, way, graph in runs:
            fn = partial(modules[way], x)  # what fns[way] of measure_layer calls
            try:
                if graph:
                    summary = profile_graph(fn, calls=PROFILE_CALLS, evo_names=evo_names)
                else:  # the warm-up call compiles a compiled way
                    summary = profile_calls(fn, calls=PROFILE_CALLS, device=device, evo_names=evo_names)
            except Exception as e:  # a profile is an aside: its failure is recorded, the bench goes on
                if cuda:
                    torch.cuda.synchronize()
                row["profile_failures"][name] = _reason(e)
                continue
            ms = row.get(f"{name}_ms")
            row["profile"][name] = {**summary, "call_us": None if ms is None else round(ms * 1e3, 3)}


def _copy_GBps(device: str) -> float | None:
    """The copy bandwidth of this GPU, measured now (the layer's HBM floor divides by it); None on the CPU."""
    if device != "cuda":
        return None
    from evo.evaluate.roofline import copy_bandwidth

    return round(copy_bandwidth("cuda", nbytes=1 << 28), 1)


def _setup(args: argparse.Namespace) -> tuple[Any, dict[str, Callable[..., Any]], list[int]]:
    """The model, the zoo's ops (role -> torch op) and the token counts; ValueError names what is wrong. Sets
    args.weights from auto (fp8 where the zoo holds fp8_* roles); an FP8 model is named as its zoo (<model>-fp8)."""
    from evo.api import load_zoo
    from evo.problem import DTYPES
    from evo.surface.zoo_command import parse_tokens
    from evo.zoo import load_model
    from evo.zoo.fp8_problems import FP8_ROLES, fp8_name, refuse_fp8

    if args.dtype not in DTYPES:
        raise ValueError(f"--dtype {args.dtype!r}: expected one of {', '.join(DTYPES)}")
    if args.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {args.rounds}")
    if args.context < 0:
        raise ValueError(f"--context must be 0 or more tokens, got {args.context}")
    if not 0 <= args.decode_steps <= 1 << 20:
        raise ValueError(f"--decode-steps must be between 0 and {1 << 20}, got {args.decode_steps}")
    tokens = parse_tokens(args.tokens)
    spec, ops = load_model(args.model), load_zoo(args.zoo_module)
    fp8_roles = sorted(set(ops) & set(FP8_ROLES))
    if args.weights == "auto":
        args.weights = "fp8" if fp8_roles else "bf16"
    if args.weights == "fp8":
        if refuse_fp8(spec):
            raise ValueError(refuse_fp8(spec))
        if not fp8_roles:
            raise ValueError(f"--weights fp8: {args.zoo_module} holds no fp8_* role (a zoo of `evo zoo MODEL --dtype "
                             "fp8` does)")
        spec = fp8_name(spec)
    elif fp8_roles:
        raise ValueError(f"--weights bf16: {args.zoo_module} is an FP8 zoo ({', '.join(fp8_roles)}); its layer has "
                         "FP8 weights (--weights fp8)")
    return spec, ops, tokens


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m evo.bench.zoo_layer ARGS`; returns the exit status."""
    import torch

    args = build_parser().parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("evo zoo layer bench: it times the layer on a CUDA GPU and none is visible here (--device cpu runs "
              "the eager ways only)", file=sys.stderr)
        return 2
    try:
        spec, zoo_ops, tokens = _setup(args)
    except (ValueError, OSError) as e:
        print(f"evo zoo layer bench: {one_line(str(e))}", file=sys.stderr)
        return 2
    from evo.problem import DTYPES
    from evo.zoo import layer_problems
    from evo.zoo.layers import decoder_layer
    from evo.zoo.patch import torch_tokens

    dtype = getattr(torch, DTYPES[args.dtype])
    # the KV cache's room for new tokens (written in place, as serving code does): the largest T, as the plan's rope
    room = max(tokens)
    try:
        if args.decode_steps and spec.post_norms:
            raise ValueError("--decode-steps: the decode loop (evo.zoo.decode) runs Llama-style and MoE layers; a "
                             "Gemma-2 layer's four norms and capped attention are not in it")
        experts = pick_experts(args.experts, args.device)
        plain, patched, layer = build_layers(spec, zoo_ops, dtype, args.device, args.seed, args.context, room, experts,
                                             args.layer_index, args.gemma_attention, args.weights)
    except ValueError as e:
        print(f"evo zoo layer bench: {one_line(str(e))}", file=sys.stderr)
        return 2
    fp8 = args.weights == "fp8"
    bf16 = decoder_layer(spec, dtype=dtype, device=args.device, seed=args.seed, context=args.context,
                         max_tokens=room) if fp8 else None  # the FP8 layer before quantization
    plan = layer_problems(spec, tokens, args.dtype, args.context, weights=args.weights)
    operators = {p.role: p.operator for p in plan}
    roles = {role: str(operators.get(role)) for role in patched.kernels}
    layer["note"] = layer_note(spec, plan, roles, layer)
    print(f"evo zoo layer bench: {layer['note']}", file=sys.stderr)
    doc: dict[str, Any] = {"model": spec.name, "gpu": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                           "device": args.device, "versions": versions(), "dtype": args.dtype, "weights": args.weights,
                           "context": args.context, "copy_GBps": _copy_GBps(args.device),
                           "zoo_module": str(Path(args.zoo_module).resolve()), "roles": roles, "layer": layer,
                           "layers": [],
                           "torch_tokens": torch_tokens(patched)}  # role -> T its zoo's baseline runs: torch's code
    if doc["torch_tokens"]:
        print("evo zoo layer bench: torch's code where the zoo runs its baseline: " + "; ".join(
            f"{role} at T={','.join(map(str, t))}" for role, t in doc["torch_tokens"].items()), file=sys.stderr)
    tolerances = []
    for t in tokens:
        tolerance, quantization = TOLERANCE[args.dtype], None
        if bf16 is not None:  # the FP8 layer's own error against bf16 bounds how far two FP8 layers may differ
            quantization = fp8_quantization_error(plain, bf16, _input(plain, t, args.dtype, args.device, args.seed))
            tolerance = max(tolerance, quantization)
        tolerances.append(tolerance)
        row = measure_layer(plain, patched, t, args.dtype, args.device, seed=args.seed, rounds=args.rounds,
                            tolerance=tolerance)
        if quantization is not None:
            row["fp8_quantization_error"] = quantization
        row["floor"] = layer_floor(plain, t, doc["copy_GBps"], doc["gpu"] if args.device == "cuda" else "",
                                   "fp8" if fp8 else args.dtype)
        row["floor_share"] = floor_shares(row)
        doc["layers"].append(row)
        json_path, _ = write_zoo(doc, args.out)
        print(f"T={t}: " + ", ".join(f"{w} {row[f'{w}_ms']:.4g} ms" for w in WAYS if row[f"{w}_ms"] is not None)
              + f"; error {row['max_rel_error']} (tolerance {row['tolerance']:g})", file=sys.stderr)
    if args.decode_steps:
        decode = doc["decode"] = measure_decode(plain, patched, args.decode_steps, args.dtype, args.device,
                                                max(tolerances), seed=args.seed, compile_mode=COMPILE_MODE)
        json_path, _ = write_zoo(doc, args.out)
        print(f"decode, {args.decode_steps} steps: " + ", ".join(
            f"{w} {decode[k]:.4g} ms" for w in WAYS for k in (f"{w}_ms", f"{w}_graph_ms") if decode[k] is not None)
            + f" per step; error {decode['max_rel_error']}", file=sys.stderr)
    if args.profile:  # after all the timings (profile_layer says why)
        evo_names = evo_kernel_names(Path(args.zoo_module).read_text())
        for row in doc["layers"]:
            profile_layer(plain, patched, row, args.dtype, args.device, seed=args.seed, evo_names=evo_names)
            json_path, _ = write_zoo(doc, args.out)
            print(f"T={row['tokens']}, microseconds per layer call:\n{bucket_table(row['profile'])}"
                  + "".join(f"\n  {w}: {why}" for w, why in row["profile_failures"].items()), file=sys.stderr)
    print(to_markdown(doc), end="")
    wrong = [r["tokens"] for r in doc["layers"] if not r["within_tolerance"]]
    if doc.get("decode") and not doc["decode"]["within_tolerance"]:
        print(f"evo zoo layer bench: the zoo's decode loop is outside its tolerance (see {json_path})", file=sys.stderr)
        return 1
    if wrong:
        print(f"evo zoo layer bench: the zoo's layer is outside its tolerance at T={','.join(map(str, wrong))} "
              f"(see {json_path})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
