"""Exporting elite kernels from a run as standalone Triton modules (they import only triton and torch).

`export_one` writes the elite of one problem (evo.archive.elite, the definition status, report and bench
share: the archive's best on one GPU model and versions): the operator's rendered source, a header stating
how it was measured, and a `__main__` self-check that compares it with torch on fresh random inputs and, on
CUDA, measures it against the baseline with the run's own protocol (_MAIN: GPU time as evo.evaluate.timing
takes it, the call clock and host µs as evo.evaluate.clocks do), printing both ratios beside the header's and
whether they agree. `_evo_measure()` in the module returns those figures, for benchmarks to call. The
self-check code comes from the operator (`Operator.selfcheck_source`), so this module knows nothing of any
operator.

`export_all` writes one module holding every measured problem's elite, dispatching a call to the elite of its
problem, or of the *nearest* measured problem when the call's shape was not measured: same dtype, smallest
sum over dimensions of |log2(size / measured size)|, earliest measured on a tie. Such a fallback kernel was
neither timed nor checked at that shape, and the module warns once per elite it uses so (naming the first such
shape): a decode loop whose key length grows every step gets one warning, not one per step. A problem whose elite
did not beat its baseline side by side runs the baseline instead (evo.surface.kernel_choice: never slower than what
it replaces); the header says which problems run which, and why.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from evo.archive.elite import BestKernel, best_evaluation, best_kernels
from evo.evaluate.modules import source_hash
from evo.experiment.spec import Experiment
from evo.launch.interpreter import NO_GPU_LINE
from evo.problem import HOPPER, Problem, Target, shape_distance
from evo.store.record import Evaluation
from evo.store.sqlite import Store
from evo.surface.export_selfcheck import OBJECTIVE_TEXT, SELFCHECK_MAIN, row_clocks, selfcheck_constants
from evo.surface.kernel_choice import BASELINE_SOURCE, export_choices
from evo.surface.smoke_label import smoke_score, smoke_value

__all__ = ["ExportError", "BestKernel", "best_kernels", "find_best", "export_one", "export_all", "is_smoke",
           "run_target", "render_module", "rerendered", "NO_SOURCE"]

SMOKE_WARNING = ("this run was a CPU smoke run (no GPU): the kernel was checked in the Triton interpreter and "
                 "its fitness was a stand-in, NOT a timing; nothing here says how fast it is on a GPU")


# why an export renders a genome again rather than write the source measured
NO_SOURCE = "the run's store keeps no source of this kernel (its row was stored by an older evo)"


# The first line of every exported module ("# " before it), by which evo.api.load knows one before running any of it
HEADER_ONE, HEADER_ALL = "evo elite kernel:", "evo elite kernels:"


class ExportError(ValueError):
    """A request that cannot be served (unknown shape, no correct kernel, ...); the message is one line."""



def is_smoke(ev: Evaluation, meta: dict[str, Any] | None = None) -> bool:
    """True when the run measured nothing on a GPU (the labelled CPU smoke mode)."""
    kind = (meta or {}).get("executor")  # evo.search.run stores the executor kind in the store's metadata
    gpu = (ev.gpu or "").lower()
    return kind == "smoke" or "interpret" in gpu or gpu.startswith("cpu") or gpu.startswith("smoke")


def run_target(meta: dict[str, Any]) -> Target:
    """The target the run rendered for (store meta 'target'), else Hopper."""
    t = meta.get("target")
    if isinstance(t, dict) and {"name", "arch", "smem_bytes", "num_sms"} <= set(t):
        return Target(str(t["name"]), int(t["arch"]), int(t["smem_bytes"]), int(t["num_sms"]),
                      int(t.get("warp_size", 32)))
    return HOPPER


def find_best(store: Store, problem_key: str, experiment: Experiment | None = None) -> Evaluation | None:
    """The best evaluation of a problem (evo.archive.elite: the archive's best on one GPU model and versions)."""
    rows = store.evaluations(problem_key, "ok")
    return best_evaluation(store, Problem.from_json(rows[0].problem), experiment) if rows else None


def _select(store: Store, sizes: tuple[int, ...], dtype: str | None, experiment: Experiment | None) -> BestKernel:
    """The elite of the one problem of `sizes` (and `dtype`): only that problem's rows are read, however many the
    run measured."""
    measured = store.problems(status="ok")
    if not measured:
        raise ExportError("the run has no correct evaluation yet: nothing to export")
    hits = [p for p in measured if p.sizes == tuple(sizes) and (dtype is None or p.dtype == dtype)]
    shape = "x".join(str(s) for s in sizes)
    if not hits:
        listing = ", ".join(f"{p.shape_text} {p.dtype}" for p in measured[:_LISTED])
        more = f" and {len(measured) - _LISTED} more (`evo status RUN` lists them)" if len(measured) > _LISTED else ""
        raise ExportError(f"no measured kernel for shape {shape}{' ' + dtype if dtype else ''}; "
                          f"measured: {listing}{more}")
    if len(hits) > 1:
        raise ExportError(f"shape {shape} was measured in several dtypes ({', '.join(p.dtype for p in hits)}); "
                          f"choose one with --dtype")
    ev = best_evaluation(store, hits[0], experiment)
    if ev is None:
        raise ExportError(f"{hits[0].key} has no correct evaluation that can be exported (its rows are damaged)")
    return BestKernel(hits[0], ev)


_LISTED = 12  # measured shapes a refusal names (a run may hold thousands)


def _clean(text: Any) -> str:
    """Text from the store, safe inside a `#` comment line."""
    return " ".join(str(text).split())


def _when(ts: float | None) -> str:
    if not ts:
        return "unknown"
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _header(op: Any, elite: BestKernel, meta: dict[str, Any], smoke: bool, note: str) -> list[str]:
    ev, p = elite.evaluation, elite.problem
    from evo.surface.package_origin import evo_version

    version = evo_version()  # one line where a folder named evo hides the package

    genome = json.loads(ev.genome).get("genes", {})
    lines = [
        f"{HEADER_ONE} {p.operator} {p.shape_text} {p.dtype} ({', '.join(f'{k}={v}' for k, v in p.shape)})",
        "",
    ]
    if smoke:
        lines += [f"WARNING: {SMOKE_WARNING}.", ""]
    versions = ", ".join(f"{_clean(k)} {_clean(v)}" for k, v in sorted(ev.versions.items())) or "versions unknown"
    lines += [
        f"Exported by evo-kernels {version} on {_when(_dt.datetime.now().timestamp())} from run "
        f"{_clean(ev.run_id or '?')} (experiment {_clean(meta.get('experiment') or '?')}).",
        f"Measured on: {_clean(ev.gpu or '?')}; {versions}; at {_when(ev.finished_at)}.",
    ]
    if smoke:
        lines.append(f"Smoke score (the CPU smoke evaluator's, as evo status and evo report show it): "
                     f"{smoke_score(smoke_value(op, p, ev))}.")
    else:
        spread = f", inter-quartile range {ev.spread_ms:.3g} ms" if ev.spread_ms is not None else ""
        lines.append(f"Median time: {ev.median_ms:.4g} ms of GPU time (CUDA events around one launch, L2 flushed "
                     f"before each; {op.throughput(p, ev.median_ms):.4g} {op.throughput_unit}{spread}, "
                     f"{len(ev.times_ms)} timed runs).")
        clocks = row_clocks(ev)  # (ev.ratio is on the objective's clock: each clock's ratio is named apart)
        if clocks["gpu_ratio"]:
            lines.append(f"Baseline {_clean(ev.baseline or '?')}: {ev.baseline_ms:.4g} ms, timed in the same process "
                         f"on the same inputs: ratio {clocks['gpu_ratio']:.3f}x (> 1: this kernel is faster).")
        lines += _clock_lines(clocks)
    if ev.max_rel_error is not None:
        lines.append(f"Relative error against the reference when measured: {ev.max_rel_error:.3g}.")
    lines += [f"Genome: {_clean(' '.join(f'{k}={v}' for k, v in sorted(genome.items())))}",
              f"Genome (canonical): {_clean(ev.genome)}",
              f"Source hash: {_clean(ev.source_hash)}; evaluation id {ev.id}; origin {_clean(ev.origin or '?')}."]
    if note:
        lines.append(note)
    lines += ["", f"Entry point: {op.entry}(*inputs).",
              "Run `python THIS_FILE.py` to check it against torch on fresh random inputs and, with CUDA, measure it",
              "against the baseline as the run did (GPU time with L2 flushed by reading 256 MiB, CUDA events, median,",
              "interleaved; the call clock of back-to-back eager calls; host us of one call), to compare with the",
              "figures above; _evo_measure() returns what it measures as a dict. Without a GPU it runs in the",
              "Triton interpreter (check only; bf16 cannot be checked there: exit status 77)."]
    return lines


def _clock_lines(clocks: dict[str, Any]) -> list[str]:
    """The header's lines on the clocks a caller sees and on what the search ranked kernels by."""
    lines = []
    if clocks["call_ms"]:
        base = (f", baseline {clocks['baseline_call_ms']:.4g} ms: ratio {clocks['call_ratio']:.3f}x"
                if clocks["call_ratio"] else "")
        lines.append(f"Call clock (back-to-back eager calls, host launch cost included): {clocks['call_ms']:.4g} ms "
                     f"per call{base}.")
    if clocks["host_us"]:
        base = f" (baseline {clocks['baseline_host_us']:.3g} us)" if clocks["baseline_host_us"] else ""
        lines.append(f"Host time of one call: {clocks['host_us']:.3g} us{base}.")
    objective = clocks["objective"]
    ranked_by = OBJECTIVE_TEXT.get(objective, "its own")
    lines.append(f"Objective: {_clean(objective)}: the search ranked kernels by {ranked_by}"
                 f"{'' if objective == 'gpu' or clocks['call_ms'] else ' (this row has no call-clock figures)'}.")
    return lines


# A generated module's first code: its self-check (`python THIS_FILE.py`) without a GPU runs in the interpreter
NO_GPU_PREAMBLE = f'''import os as _evo_os

if __name__ == "__main__" and not _evo_os.environ.get("TRITON_INTERPRET"):
    import torch as _evo_torch

    if not _evo_torch.cuda.is_available():
        # no GPU: run the kernel in Triton's CPU interpreter (must be set before @triton.jit runs)
        _evo_os.environ["TRITON_INTERPRET"] = "1"
        print({NO_GPU_LINE!r}, file=__import__("sys").stderr)
'''  # evo.api.load's rule and line (evo.launch.interpreter), in the module's own copy

def _split_future(source: str) -> tuple[list[str], str]:
    """`from __future__` lines must open a module: lift them out of the rendered source."""
    future, rest = [], []
    for line in source.splitlines():
        (future if line.startswith("from __future__ import") else rest).append(line)
    return future, "\n".join(rest)


def _rerendered_note(op: Any, elite: BestKernel, meta: dict[str, Any], smoke: bool) -> tuple[str, str]:
    """The elite's genome rendered again (for a store that keeps no source of it), and the header's NOTE saying so."""
    ev = elite.evaluation
    source = op.render(op.family.from_canonical(ev.genome), elite.problem, run_target(meta))
    note = f"NOTE: {NO_SOURCE}: the code below is its genome rendered again"
    if smoke:  # (a smoke run checks a smaller copy of the problem: its hashes tell nothing here)
        return source, note + "."
    if not ev.source_hash or source_hash(source) == ev.source_hash:
        return source, note + ", which gives the source measured (the same hash)."
    return source, note + (", which gives a source different from the one measured (the renderer changed since the "
                           "run).")


def render_module(op: Any, elite: BestKernel, meta: dict[str, Any], stored: str | None = None) -> str:
    """The standalone module text for one elite. `stored` is its kernel's text as the run's store kept it
    (`Store.source`), written as it is: the source measured; None renders the genome again, and the header says so
    (a store made before sources were kept)."""
    ev, p = elite.evaluation, elite.problem
    smoke = is_smoke(ev, meta)
    source, note = (stored, "") if stored is not None else _rerendered_note(op, elite, meta, smoke)
    check = op.selfcheck_source(p)
    future, body = _split_future(source)
    parts = ["\n".join(f"# {line}".rstrip() for line in _header(op, elite, meta, smoke, note)), ""]
    parts += future + ([""] if future else [])
    parts += [NO_GPU_PREAMBLE, "# ---- kernel (rendered by evo from the genome above) " + "-" * 50,
              body.strip("\n"), ""]
    parts += [f"_EVO_OPERATOR = {p.operator!r}  # evo.api.load makes the entry a torch op of this operator's schema"]
    if check is None:
        parts.append("# The operator offers no self-check code, so this module has none.")
        return "\n".join(parts) + "\n"
    consts = {
        "_EVO_PROBLEM": p.key, "_EVO_DTYPE": p.dtype, "_EVO_SIZES": p.sizes, "_EVO_UNIT": op.throughput_unit,
        "_EVO_WORK_PER_MS": op.throughput(p, 1.0), "_EVO_BASELINE": ev.baseline or "baseline",
        **selfcheck_constants(ev, meta, smoke),
    }
    parts += ["", "# ---- self-check (plain torch, supplied by the operator) " + "-" * 46, check.strip("\n"), ""]
    parts += [f"{k} = {v!r}" for k, v in consts.items()]
    parts.append(SELFCHECK_MAIN.replace("{entry}", op.entry))
    return "\n".join(parts)


def _operator_for(elite: BestKernel) -> Any:
    import operators

    return operators.get(elite.problem.operator)


def export_one(store: Store, sizes: tuple[int, ...], dtype: str | None = None,
               experiment: Experiment | None = None) -> tuple[str, BestKernel]:
    """The standalone module of the elite for `sizes` (and `dtype`, needed when several were measured)."""
    chosen = _select(store, tuple(sizes), dtype, experiment)
    stored = store.source(chosen.evaluation.source_hash)
    return render_module(_operator_for(chosen), chosen, store.all_meta(), stored), chosen


def rerendered(store: Store, found: list[BestKernel]) -> str:
    """One line for the user when some of the exported elites' kernels were rendered again from their genomes (the
    store keeps no source of them: made by an older evo); '' when every one is the source measured."""
    missing = [e for e in found if store.source(e.evaluation.source_hash) is None]
    if not missing:
        return ""
    which = "the kernel" if len(found) == 1 else f"{len(missing)} of the {len(found)} kernels"
    return (f"note: the run's store keeps no source of {which} (stored by an older evo): rendered again from the "
            "genome, as the NOTE in the module's header says")


# How a generated module imports a module it holds as source text (`evo export --all`'s elites, `evo zoo --collect`'s
# operators): Triton reads kernel source from files, so the text is written once under a cache folder
# ($EVO_KERNEL_DIR, else the temporary folder's evo-export), named by its hash, and imported from there.
IMPORT_SOURCE = '''

def _evo_import(source, prefix):
    """The module whose source is `source`, imported from <cache folder>/<prefix>_<hash>.py."""
    import hashlib
    import importlib.util
    import sys
    import tempfile

    digest = hashlib.sha256(source.encode()).hexdigest()[:20]
    folder = _evo_os.environ.get("EVO_KERNEL_DIR") or _evo_os.path.join(tempfile.gettempdir(), "evo-export")
    _evo_os.makedirs(folder, exist_ok=True)
    path = _evo_os.path.join(folder, f"{prefix}_{digest}.py")
    if not _evo_os.path.exists(path) or open(path).read() != source:
        tmp = f"{path}.tmp{_evo_os.getpid()}"
        with open(tmp, "w") as f:
            f.write(source)
        _evo_os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(f"{prefix}_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
'''

_DISPATCH = '''

def _evo_load(key):
    """Import the elite module of a measured problem (once)."""
    if key not in _EVO_LOADED:
        _EVO_LOADED[key] = _evo_import("\\n".join(_EVO_VARIANTS[key]["source"]), "evo_elite")
    return _EVO_LOADED[key]


def nearest(sizes, dtype):
    """The measured problem for `sizes` in `dtype`: the exact one, else the nearest (see the header)."""
    import math

    sizes = tuple(int(s) for s in sizes)
    same = [k for k, v in _EVO_VARIANTS.items() if v["dtype"] == dtype]
    if not same:
        raise ValueError(f"no kernel for dtype {dtype!r}; measured: {', '.join(_EVO_VARIANTS)}")
    if len(sizes) != len(_EVO_DIMS):
        raise ValueError(f"expected {len(_EVO_DIMS)} sizes ({'x'.join(_EVO_DIMS)}), got {sizes}")
    dist = lambda k: sum(abs(math.log2(a / b)) for a, b in zip(sizes, _EVO_VARIANTS[k]["sizes"]))  # noqa: E731
    return min(same, key=lambda k: (dist(k), list(_EVO_VARIANTS).index(k)))


def kernel_for(sizes, dtype):
    """The function serving `sizes` and `dtype` (e.g. "bf16"): the elite's entry, or its baseline where the elite did
    not beat it (USES says which)."""
    import warnings

    key = nearest(sizes, dtype)
    if tuple(sizes) != _EVO_VARIANTS[key]["sizes"] and key not in _EVO_WARNED:
        _EVO_WARNED.add(key)
        warnings.warn(f"no kernel was measured for {'x'.join(map(str, sizes))} {dtype}: using the choice of "
                      f"{key} ({USES[key][0]}), which was neither timed nor checked at this shape (other unmeasured "
                      "shapes it serves are not warned about again)", stacklevel=2)
    module = _evo_load(key)
    return _evo_baseline(module) if USES[key][0] == "baseline" else getattr(module, _EVO_ENTRY)
{baseline}

def _evo_out_dtype(options):
    """The output dtype the options ask for (out_dtype=, else out='s), None for none: an operator whose problem dtype
    is its output's (fp8_gemm: e4m3 inputs, bf16 or fp16 out) is chosen by it."""
    dtype = options.get("out_dtype")
    return dtype if dtype is not None else getattr(options.get("out"), "dtype", None)


def _evo_choose(inputs, options):
    """The entry function for inputs like these (chosen once per input shapes and dtype)."""
    import torch

    first = _evo_load(next(iter(_EVO_VARIANTS)))
    sizes = tuple(first.problem_sizes(*inputs))
    if hasattr(first, "problem_dtype"):  # the problem's dtype is not its first tensor's (fp8_gemm: the output's)
        torch_dtype = first.problem_dtype(*inputs, **options)
    else:
        torch_dtype = next(t for t in inputs if isinstance(t, torch.Tensor)).dtype
    dtype = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(torch_dtype, str(torch_dtype))
    fn = kernel_for(sizes, dtype)
    _EVO_CHOSEN[(tuple(getattr(t, "shape", None) for t in inputs), inputs[0].dtype, _evo_out_dtype(options))] = fn
    return fn


def {entry}(*inputs, **options):
    """Run the elite kernel for the problem these inputs form (`options`: the entry's own, e.g. out=)."""
    try:  # a dictionary look-up per call: the choice is made once per input shapes and dtypes
        fn = _EVO_CHOSEN[(tuple(getattr(t, "shape", None) for t in inputs), inputs[0].dtype, _evo_out_dtype(options))]
    except (KeyError, IndexError, AttributeError):
        fn = _evo_choose(inputs, options)
    return fn(*inputs, **options)


def _evo_selfcheck_all() -> int:
    """Run the self-check of every measured problem's elite; the worst exit status wins (77: not checked)."""
    codes = [_evo_load(key)._evo_selfcheck() for key in _EVO_VARIANTS]
    status = 1 if 1 in codes else max(codes)
    return status


if __name__ == "__main__":
    raise SystemExit(_evo_selfcheck_all())
'''


def export_all(store: Store, experiment: Experiment | None = None) -> tuple[str, list[BestKernel]]:
    """One module holding every measured problem's elite, with a dispatcher (see the module docstring)."""
    found = best_kernels(store, experiment)
    if not found:
        raise ExportError("the run has no correct evaluation yet: nothing to export")
    ops = {e.problem.operator for e in found}
    if len(ops) > 1:
        raise ExportError(f"the run holds several operators ({', '.join(sorted(ops))}); export them one by one")
    op = _operator_for(found[0])
    meta = store.all_meta()
    smoke = any(is_smoke(e.evaluation, meta) for e in found)
    choices = export_choices(found, smoke)
    head = [f"{HEADER_ALL} {op.name}, {len(found)} measured problems, one module.", ""]
    if smoke:
        head += [f"WARNING: {SMOKE_WARNING}.", ""]
    head += [f"Call {op.entry}(*inputs): it runs the elite of the problem the inputs form; for a shape that was not",
             "measured, the elite of the nearest measured problem: same dtype, smallest sum over dimensions of",
             "|log2(size / measured size)|, earliest measured on a tie. That kernel was neither timed nor checked",
             "at the new shape (a warning says so once per elite so used). kernel_for(sizes, dtype) returns it.",
             "Run `python THIS_FILE.py` to self-check every measured elite (see each one's own header).", "",
             "Never slower than what it replaces: a problem runs evo's elite only where it beat its baseline side by",
             "side (timed in the same process, on the run's objective clock); elsewhere the baseline it was timed",
             "against (torch's own op). USES[problem] = (evo or baseline, why).", "",
             "Measured problems (median GPU time and ratio to the baseline; call clock and its ratio where measured):"]
    for e in found:
        ev = e.evaluation
        clocks = row_clocks(ev)
        ratio = f"{clocks['gpu_ratio']:.3f}x {ev.baseline}" if clocks["gpu_ratio"] and not smoke else "-"
        if clocks["call_ratio"] and not smoke:
            ratio += f"; call clock {clocks['call_ms']:.4g} ms, {clocks['call_ratio']:.3f}x"
        measured = f"smoke score {smoke_score(smoke_value(op, e.problem, ev))}" if smoke else f"{ev.median_ms:.4g} ms"
        head.append(f"  {e.problem.key}: {measured}, {ratio}, "
                    f"on {_clean(ev.gpu or '?')}" + ("" if smoke else f"; objective {_clean(clocks['objective'])}"))
        choice = choices[e.problem.key]
        head.append(f"    runs {choice.use}: {_clean(choice.why)}")
    variants = {}
    for e in found:
        variants[f"{e.problem.shape_text}:{e.problem.dtype}"] = {
            "sizes": e.problem.sizes, "dtype": e.problem.dtype,
            "source": render_module(op, e, meta, store.source(e.evaluation.source_hash)).split("\n"),
        }
    lines = ["\n".join(f"# {line}".rstrip() for line in head), "", "import os as _evo_os", "",
             NO_GPU_PREAMBLE.split("\n", 2)[2].rstrip(), "",
             f"_EVO_OPERATOR = {op.name!r}", f"_EVO_ENTRY = {op.entry!r}", f"_EVO_DIMS = {tuple(op.dims)!r}",
             "_EVO_LOADED = {}", "_EVO_WARNED = set()",
             "_EVO_CHOSEN = {}  # (input shapes, dtype, out dtype) -> entry function",
             "# problem -> (what runs it: evo or baseline, why); never slower than what it replaces",
             "USES = {" + ", ".join(f"{k!r}: ({c.use!r}, {c.why!r})" for k, c in (
                 (f"{e.problem.shape_text}:{e.problem.dtype}", choices[e.problem.key]) for e in found)) + "}",
             "# Each measured problem's standalone module, one source line per list item.",
             "_EVO_VARIANTS = {"]
    for key, v in variants.items():
        lines.append(f"    {key!r}: {{")
        lines.append(f"        \"sizes\": {v['sizes']!r}, \"dtype\": {v['dtype']!r}, \"source\": [")
        lines += [f"            {line!r}," for line in v["source"]]
        lines.append("        ]},")
    lines.append("}")
    return "\n".join(lines) + IMPORT_SOURCE + _DISPATCH.replace("{baseline}", BASELINE_SOURCE).replace(
        "{entry}", op.entry), found


def nearest_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """The distance `export_all` modules use to pick the nearest measured shape."""
    return shape_distance(a, b)
