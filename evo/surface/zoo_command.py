"""`evo zoo MODEL`: a model's kernel plan (per role: the operator and its shape at each token count) and one
experiment file per operator, with the `evo run` commands that search them; `--run` searches them all in one run
(one executor, one progress view: evo.surface.zoo_search), then collects the module and writes the report (one
command from a model to its kernels).

Every bad input (a model file that is missing or invalid, a bad token list, dtype or budget, an output folder
that cannot be written) ends with one line and exit status 2, before any file is written.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["add_zoo_command", "zoo_command", "parse_tokens", "format_plan", "ZooRun"]

MAX_TOKEN_COUNTS = 64  # a plan has a column per token count; more is a typo, not a plan


def parse_tokens(text: str) -> list[int]:
    """"1,16,128,2048" -> [1, 16, 128, 2048]; ValueError naming the bad item otherwise."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit() or int(item) <= 0:
            raise ValueError(f"--tokens {text!r}: {item!r} is not a positive integer (e.g. --tokens 1,16,128,2048)")
        if int(item) in out:
            raise ValueError(f"--tokens {text!r}: {int(item)} is given twice")
        out.append(int(item))
    if len(out) > MAX_TOKEN_COUNTS:
        raise ValueError(f"--tokens: {len(out)} token counts; at most {MAX_TOKEN_COUNTS}")
    return out


def format_plan(problems: list[Any], tokens: list[int]) -> str:
    """The plan as a table: a row per role, a column per token count (a role no operator searches is flagged; `-`
    where the plan runs that role at another T only: the linear roles at T <= 16, the gemm roles above)."""
    rows: dict[str, dict[int, Any]] = {}
    for p in problems:
        rows.setdefault(p.role, {})[p.tokens] = p
    header = ["role", "operator", "runs"] + [f"T={t}" for t in tokens]
    table = [header]
    for role, by_tokens in rows.items():
        first = next(iter(by_tokens.values()))
        operator = first.operator or "(none: torch runs it)"
        uses = "/".join(str(u) for u in dict.fromkeys(p.uses for p in by_tokens.values()))
        runs = f"{uses}x per {first.scope}"
        table.append([role, operator, runs] + [by_tokens[t].shape_text if t in by_tokens else "-" for t in tokens])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    notes = list(dict.fromkeys(p.note for p in problems if p.note))
    return "\n".join(lines + [f"note: {n}" for n in notes])


def zoo_command(args: argparse.Namespace) -> int:
    usage_error = args.usage_error  # the CLI's UsageError, passed in: this module does not import the CLI
    from evo.experiment.config import parse_experiment
    from evo.problem import DTYPES, operator_file_stem
    from evo.store.atomic_file import write_atomic
    from evo.zoo import ModelError, experiments_for, layer_problems, load_model
    from evo.zoo.fp8_problems import fp8_name, refuse_fp8

    try:
        tokens = parse_tokens(args.tokens)
    except ValueError as e:
        raise usage_error(str(e)) from None
    weights, asked = "bf16", args.dtype
    if args.dtype == "fp8":  # FP8 weights, the activations in bf16 (fp16 under --smoke): evo.zoo.fp8_problems
        weights, args.dtype = "fp8", None
    if args.dtype is None:  # the CPU interpreter of a smoke run computes bf16 wrongly: fp16 is its default
        args.dtype = "fp16" if args.smoke else "bf16"
    if args.dtype not in DTYPES:
        raise usage_error(f"--dtype {args.dtype!r}: expected one of {', '.join(DTYPES)}, or fp8 (FP8 weights)")
    if not 0 < args.wall_s < math.inf:
        raise usage_error(f"--wall-s {args.wall_s!r}: expected a positive number of seconds per problem")
    if args.context < 0:
        raise usage_error(f"--context {args.context}: expected the number of tokens in the KV cache, 0 or more")
    try:
        spec = load_model(args.model, name=args.name)
    except ModelError as e:
        raise usage_error(str(e)) from None
    refusal = refuse_fp8(spec)  # why an FP8 plan cannot serve this model, or None
    if asked is None and spec.quantization == "fp8":  # an FP8 checkpoint's config: its plan is the FP8 one
        if refusal:
            why = refusal.removeprefix("--dtype fp8: ").removesuffix(" (plan it in bf16)")
            raise usage_error(f"{args.model}: quantization_config: FP8 weights, but {why}; --dtype bf16 plans its "
                              "unquantized layers")
        weights = "fp8"
        print(f"{args.model}: quantization_config says FP8 weights with per-channel scales: the plan is --dtype fp8 "
              "(--dtype bf16 plans the unquantized model)", file=sys.stderr)
    args.weights = weights
    if weights == "fp8" and refusal:
        raise usage_error(refusal)
    if weights == "fp8" and args.name is None:  # its own folder and runs beside the model's bf16 zoo
        spec = fp8_name(spec)
    # (a Gemma-2 layer's plan computes its window: attention+causal+...+window<W>, evo.zoo.gemma_problems)
    if spec.sliding_window and not spec.post_norms and args.context + max(tokens) > spec.sliding_window:
        raise usage_error(f"--context {args.context} and --tokens up to {max(tokens)}: {spec.name} attends to a "
                          f"sliding window of its last {spec.sliding_window} tokens, and evo's plan is full causal "
                          "attention, the same only while context + T fits the window")
    folder = Path(args.output) / spec.name
    if folder.exists() and not folder.is_dir():
        raise usage_error(f"-o {args.output}: {folder} is a file, not a folder")
    if sum((args.collect, args.report, args.run)) > 1:
        raise usage_error("--run, --collect and --report: one at a time (--run collects and reports by itself)")
    if args.collect:
        return _collect(spec, tokens, args.dtype, args.context, folder, usage_error, weights)
    if args.report:
        return _report(spec, tokens, args.dtype, args.context, folder, args.layer_results, usage_error, weights)
    if args.evaluations is not None and args.evaluations < 1:
        raise usage_error(f"--evaluations {args.evaluations}: expected a positive number per problem")
    texts = experiments_for(spec, tokens, args.dtype, wall_s=args.wall_s, output=str(folder),
                            evaluations=args.evaluations, executor="smoke" if args.smoke else "ray",
                            context=args.context, objective=args.objective, weights=weights)
    files = {op: folder / f"{operator_file_stem(op)}.yaml" for op in texts}
    # every experiment validated (a ConfigError is one line) before any file is written
    counts = {op: len(parse_experiment(text, str(files[op])).problems) for op, text in texts.items()}
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise usage_error(f"cannot create {folder}: {e.strerror or e}") from None
    problems = layer_problems(spec, tokens, args.dtype, args.context, weights=weights)
    experts = (f", {spec.num_experts} experts top-{spec.experts_per_token}"
               + (f" + a shared expert of {spec.shared_expert_size}" if spec.shared_expert_size else "")
               if spec.num_experts else "")
    print(f"model {spec.name}: hidden {spec.hidden_size}, intermediate {spec.intermediate_size} ({spec.mlp}{experts}), "
          f"heads {spec.num_attention_heads}/{spec.num_key_value_heads} kv x {spec.head_dim}, vocab "
          f"{spec.vocab_size}; {'fp8 weights, ' * (weights == 'fp8')}{args.dtype}; T new tokens of one sequence "
          f"after {args.context} tokens in the KV "
          "cache; shapes in the operators' dims (gemm and linear MxNxK, rmsnorm/softmax rowsxcols, attention "
          "batchxheadsxkv_headsxq_lenxkv_lenxhead_dim, rope_cache tokensxheadsxkv_headsxhead_dimx(cache capacity - "
          "tokens)); the linear roles serve T <= 16, the gemm roles above")
    print(format_plan(problems, tokens))
    try:
        for op, text in texts.items():
            if not (args.run and files[op].exists() and files[op].read_text() == text):
                write_atomic(files[op], text)
    except OSError as e:
        raise usage_error(f"cannot write the experiments under {folder}: {e.strerror or e}") from None
    if args.run:
        return _run_all(args, spec, tokens, folder, files, problems)
    print(f"wrote {len(files)} experiments ({sum(counts.values())} problems, {args.wall_s:g} s each at most) "
          f"under {folder}; search them with:")
    for op, path in files.items():
        print(f"  evo run {shlex.quote(str(path))}   # {op}: {counts[op]} problems")
    again = " ".join(shlex.quote(a) for a in (args.model, *_named(args), "--tokens", args.tokens, "--dtype",
                                              _dtype_arg(args), "-o", args.output, "--context", str(args.context)))
    print(f"then bundle their kernels into one module: evo zoo {again} --collect")
    return 0


def _dtype_arg(args: argparse.Namespace) -> str:
    """The --dtype a printed command repeats: fp8 for FP8 weights (args.dtype is then the activations')."""
    return "fp8" if getattr(args, "weights", "bf16") == "fp8" else args.dtype


def _named(args: argparse.Namespace) -> tuple[str, ...]:
    """`--name NAME` where it was given, and `--smoke`: a command printed to run again must find the same folder and
    problems (an FP8 plan's activations are fp16 under --smoke, bf16 without)."""
    return (("--name", args.name) if args.name is not None else ()) + (("--smoke",) if args.smoke else ())


def _run_all(args: argparse.Namespace, spec: Any, tokens: list[int], folder: Path, files: dict[str, Path],
             problems: list[Any]) -> int:
    """Search every operator's experiment in one run (resuming those an earlier --run left, skipping those searched
    to their budget), then collect and report. A search that ends otherwise than done (interrupted, workers lost)
    stops here with its exit status."""
    from evo.experiment.config import load_experiment
    from evo.experiment.rundir import RunDir
    runs = []
    for i, (op, path) in enumerate(files.items(), 1):
        roles = ", ".join(dict.fromkeys(f"{p.role} T={p.tokens}" for p in problems if p.operator == op))
        experiment = load_experiment(path)
        rd = RunDir.of(experiment.output, experiment.name)
        if rd.exists() and _finished(rd, experiment, path):
            print(f"[zoo {i}/{len(files)}] {op}: {roles} (searched to its budget earlier: nothing to do)", flush=True)
            continue
        runs.append(ZooRun(op, path, rd.exists(), roles))
    again = " ".join(shlex.quote(a) for a in ("evo", "zoo", args.model, *_named(args), "--tokens", args.tokens,
                                              "--dtype", _dtype_arg(args), "-o", args.output, "--context",
                                              str(args.context), "--run"))
    status = args.search_zoo(runs, again, args.usage_error) if runs else 0
    if status != 0:
        print(f"[zoo] stopped (exit status {status}); `evo zoo` with the same arguments and --run continues where it "
              "stopped", flush=True)
        return status
    weights = getattr(args, "weights", "bf16")
    status = _collect(spec, tokens, args.dtype, args.context, folder, args.usage_error, weights)
    return status or _report(spec, tokens, args.dtype, args.context, folder, args.layer_results, args.usage_error,
                             weights)


@dataclass(frozen=True)
class ZooRun:
    """One operator's experiment to search: its file, whether an earlier run is resumed, and the roles it serves."""

    operator: str
    path: Path
    resume: bool
    roles: str


def _finished(rd: Any, experiment: Any, path: Path) -> bool:
    """Whether the run searched this very experiment file (its copy in the run is the same text: a new budget is
    another search) and every problem of it ended (the search stores a problem's summary only then; an
    interrupted one has none). A store that cannot be read is not finished: resuming it says what is wrong."""
    from evo.store.sqlite import Store

    try:
        if rd.experiment.read_text() != path.read_text():
            return False
        with Store(rd.store, readonly=True) as store:
            return all(store.meta(f"summary:{p.key}") is not None for p in experiment.problems)
    except Exception:  # noqa: BLE001 - evo run --resume reports a damaged store in one line
        return False


def _collect(spec: Any, tokens: list[int], dtype: str, context: int, folder: Path,
             usage_error: type[Exception], weights: str = "bf16") -> int:
    from evo.surface.zoo_collect import CollectError, collect

    try:
        path, served, missing = collect(spec, tokens, dtype, folder, context, weights)
    except CollectError as e:
        raise usage_error(str(e)) from None
    except OSError as e:
        raise usage_error(f"cannot write the module under {folder}: {e.strerror or e}") from None
    print(f"wrote {path}: {len(served)} roles ({', '.join(served)})")
    for m in missing:
        print(f"  not served: {m}")
    print(f"check it: python {shlex.quote(str(path))}   |   use it: evo.api.load_zoo({str(path)!r})")
    return 0


def _report(spec: Any, tokens: list[int], dtype: str, context: int, folder: Path, layer_results: str | None,
            usage_error: type[Exception], weights: str = "bf16") -> int:
    from evo.surface.zoo_report import write_zoo_report

    if not folder.is_dir():
        raise usage_error(f"no zoo at {folder}: plan it and run its experiments first (evo zoo MODEL -o DIR)")
    try:
        path = write_zoo_report(spec, tokens, dtype, context, folder,
                                Path(layer_results) if layer_results else None, weights)
    except ValueError as e:
        raise usage_error(str(e)) from None
    except OSError as e:
        raise usage_error(f"cannot write the report under {folder}: {e.strerror or e}") from None
    print(f"wrote {path} (self-contained: open it in a browser, no network needed)")
    return 0


def add_zoo_command(subparsers: Any, usage_error: type[Exception], search_zoo: Any = None) -> argparse.ArgumentParser:
    """Register `zoo` on the `evo` command's subparsers (argparse's add_subparsers() object); bad input raises
    `usage_error` (the CLI's UsageError: one line, exit status 2); `search_zoo(runs, again, usage_error) -> exit
    status` (evo.surface.zoo_search's) searches --run's experiments (passed in by the CLI, which sits above the
    search machinery: importing it here would lift this module's import floor)."""

    z = subparsers.add_parser("zoo", help="a model's kernel plan and one experiment per operator",
                              description=__doc__.split("\n\n")[0])
    z.add_argument("model", metavar="MODEL", help="a Hugging Face config.json or a model YAML, e.g. "
                                                  "experiments/models/llama-3-8b.json")
    z.add_argument("--name", default=None,
                   help="the model's name: its folder under DIR and its runs' names (default: the file's name; for a "
                        "config.json the config's _name_or_path, else its folder's name, else its architecture and "
                        "sizes)")
    z.add_argument("--tokens", default="1,16,128,2048",
                   help="token counts (the GEMMs' M), comma-separated (default: 1,16,128,2048)")
    z.add_argument("--dtype", default=None,
                   help="fp16, bf16 or fp32 (default: bf16; fp16 with --smoke, whose CPU interpreter computes bf16 "
                        "wrongly); fp8: the projections' weights in e4m3 with per-channel scales, the activations "
                        "in bf16 (fp16 with --smoke); the zoo is named <model>-fp8 unless --name is given; the "
                        "default for a config whose quantization_config is FP8 with per-channel scales")
    z.add_argument("-o", "--output", metavar="DIR", default="runs/zoo",
                   help="experiments go to DIR/<model>/<operator>.yaml, their runs beside them (default: runs/zoo)")
    z.add_argument("--context", type=int, default=0, metavar="N",
                   help="tokens already in the KV cache that the T new tokens attend to: 0 (default) is a prefill "
                        "of T tokens; e.g. --tokens 1,4 --context 8191 is decode at an 8k context")
    z.add_argument("--wall-s", type=float, default=30.0, metavar="S",
                   help="search budget per problem, in seconds (default: 30)")
    z.add_argument("--objective", choices=("gpu", "call"), default="gpu",
                   help="the clock kernels are ranked by: gpu (default: GPU time, what CUDA graphs replay, as serving "
                        "engines run decode) or call (back-to-back eager calls, host launch cost included)")
    z.add_argument("--evaluations", type=int, default=None, metavar="N",
                   help="also stop each problem's search after N evaluations")
    z.add_argument("--smoke", action="store_true",
                   help="experiments for the CPU smoke executor (fp16/fp32; fitness is NOT a timing): to try the flow")
    z.add_argument("--collect", action="store_true",
                   help="after the runs: bundle every operator's elites into DIR/<model>/<model>_kernels.py")
    z.add_argument("--report", action="store_true",
                   help="after the runs: DIR/<model>/report.html (each role's elite against its baseline, the layer "
                        "end to end, a roofline, where the layer's time goes)")
    z.add_argument("--layer-results", metavar="ZOO_JSON",
                   help="with --report: the layer benchmark's zoo.json (python -m evo.bench.zoo_layer; default "
                        "DIR/<model>/zoo.json when it exists)")
    z.add_argument("--run", action="store_true",
                   help="search every experiment in one run (one executor, one progress view; resuming runs an "
                        "earlier --run left), then --collect and --report: one command from a model to its kernels")
    z.set_defaults(func=zoo_command, usage_error=usage_error, search_zoo=search_zoo)
    return z
