"""evo's Python face: kernels as torch ops.

    from evo.api import load
    mm = load("kernel.py")                                 # a module `evo export` wrote (one elite, or --all)
    mm = load("runs/quick_gemm", shape="4096x4096x4096")   # an elite straight from a run directory
    mm = load("runs/quick_gemm")                           # every elite of a run, dispatched by shape
    c = mm(a, b)                                           # like torch.matmul(a, b)

The callable takes and returns torch tensors like the operator's torch function (`torch.matmul`, softmax over
the last dimension, RMSNorm with a weight). It is registered with torch.library (`mm.op`, with a fake
implementation), so `torch.compile(fullgraph=True)` traces it without a graph break and
`mode="reduce-overhead"` captures its launches in CUDA graphs; in eager code it calls the kernel's launcher
directly, since the custom-op dispatcher would add ~13 us of host time to every call (measured on an H200:
20.3 us against 7.5 us for the bound launch alone). Loading compiles nothing: the first call of each argument
signature compiles (or loads from Triton's cache) and binds the kernel. Without a GPU the kernels run in Triton's
CPU interpreter (on CPU tensors; one RuntimeWarning says so), as exported modules' self-checks do.

Loading a module file imports it, which runs its top-level code as importing any Python file does: load only
files you trust. Before any of it runs, the file is read as text and refused (LoadError) unless its first line is
the header `evo export` (or `evo zoo --collect`) writes, it parses as Python, and the operator it names is
installed; a module that raises or calls sys.exit while it is imported is a LoadError too, never the caller's end.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["load", "load_zoo", "as_torch_op", "patch_model", "unpatch_model", "LoadError"]

MAX_MODULE_BYTES = 64 << 20  # an `evo export --all` of thousands of elites is a few MiB
_LOADED: dict[str, Callable[..., Any]] = {}  # op name -> its dispatching callable (a source loads once)


class LoadError(ValueError):
    """What cannot be loaded, in one line."""


def load(source: str | Path, shape: str | tuple[int, ...] | None = None,
         dtype: str | None = None) -> Callable[..., Any]:
    """The kernel(s) at `source` as a torch op: an exported module (.py), or a run directory (its elite for
    `shape` and `dtype`, or without a shape every elite behind one dispatch by shape)."""
    _refuse_a_shadowed_evo()
    path = Path(source)
    if path.is_dir():
        text = _export(path, shape, dtype)
    elif path.is_file():
        if shape is not None or dtype is not None:
            raise LoadError(f"{path}: shape and dtype choose an elite of a run directory, not of a module file")
        text = _read_module(path, "an exported module (--all included) is far smaller")
    else:
        raise LoadError(f"{path}: no such file or run directory")
    from evo.surface.export import HEADER_ALL, HEADER_ONE

    tree = _checked_module(path, text, (f"# {HEADER_ONE} ", f"# {HEADER_ALL} "), "`evo export`")
    name = _constant(tree, "_EVO_OPERATOR")
    if not isinstance(name, str):
        raise LoadError(f"{path}: not a module written by `evo export` (it names no _EVO_OPERATOR); nothing of it "
                        "was run")
    operator = _operator(path, name)
    module = _import(path, text)
    entry = getattr(module, operator.entry, None)
    if not callable(entry):
        raise LoadError(f"{path}: the module defines no {operator.entry}(), the entry of operator {name!r}")
    return as_torch_op(entry, operator, tag=hashlib.sha256(text.encode()).hexdigest()[:16])


def load_zoo(path: str | Path) -> dict[str, Callable[..., Any]]:
    """A model's kernel module (`evo zoo MODEL --collect`) as role -> torch op (`qkv`, `o_proj`, `gate_up`, ...);
    each op picks its elite by the shapes it is called with, i.e. by the runtime token count."""
    _refuse_a_shadowed_evo()
    path = Path(path)
    text = _read_module(path, "a zoo module is a few MiB")
    from evo.surface.zoo_collect import ZOO_HEADER

    tree = _checked_module(path, text, (f'"""{ZOO_HEADER} ',), "`evo zoo --collect`")
    roles = _constant(tree, "ROLES")
    if not isinstance(roles, dict) or not all(isinstance(v, str) for v in roles.values()):
        raise LoadError(f"{path}: not a module written by `evo zoo --collect` (it has no ROLES); nothing of it was run")
    chosen = {role: _operator(path, name) for role, name in roles.items()}
    zoo = _import(path, text)
    if not hasattr(zoo, "op"):
        raise LoadError(f"{path}: not a module written by `evo zoo --collect` (it has no op)")
    ops = {}
    for role, operator in chosen.items():
        source = "\n".join(zoo._ZOO_SOURCES[operator.name])
        tag = hashlib.sha256(source.encode()).hexdigest()[:16]
        ops[role] = as_torch_op(zoo.op(role), operator, tag=tag)
    return ops


def _refuse_a_shadowed_evo() -> None:
    """LoadError (one line) where a folder named evo beside the script, such as a clone of evo's repository, was
    imported as the package evo (evo.surface.package_origin)."""
    from evo.surface.package_origin import ShadowedPackage, evo_version

    try:
        evo_version()
    except ShadowedPackage as e:
        raise LoadError(str(e)) from None


def patch_model(model: Any, zoo: str | Path | Mapping[str, Callable[..., Any]], quiet: bool = False) -> Any:
    """A Hugging Face model (Llama, Qwen2, Qwen3, Mistral, Phi-3) patched in place to run a zoo's kernels where the zoo
    measured them (evo.zoo.hf_patch): `zoo` is the module `evo zoo --collect` wrote, or its ops (role -> op). Returns
    the report (`PatchReport`: what runs where) and prints its one line to stderr unless `quiet`."""
    from evo.zoo.hf_patch import patch_model as patch

    return patch(model, zoo if isinstance(zoo, Mapping) else load_zoo(zoo), quiet=quiet)


def unpatch_model(model: Any) -> Any:
    """`model` with every patch of `patch_model` undone: it computes bit for bit what it did before."""
    from evo.zoo.hf_patch import unpatch_model as unpatch

    return unpatch(model)


def _checked_module(path: Path, text: str, headers: tuple[str, ...], writer: str) -> ast.Module:
    """The module's syntax tree, read without running any of it; LoadError unless its first line is the header
    `writer` puts there and it parses as Python."""
    if not text.startswith(headers):
        raise LoadError(f"{path}: not a module written by {writer} (its first line is not the header {writer} "
                        "writes); nothing of it was run")
    try:
        return ast.parse(text, str(path))
    except SyntaxError as e:
        raise LoadError(f"{path}: not valid Python ({e.msg}, line {e.lineno}); nothing of it was run") from None
    except ValueError as e:  # e.g. a NUL byte in the text
        raise LoadError(f"{path}: not valid Python ({e}); nothing of it was run") from None


def _constant(tree: ast.Module, name: str) -> Any:
    """The literal value a top-level `name = ...` assigns (the last one), or None where there is none."""
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                value = None
    return value


def _operator(path: Path, name: str) -> Any:
    import operators

    try:
        return operators.get(name)
    except ValueError as e:
        raise LoadError(f"{path}: {' '.join(str(e).split())}; nothing of it was run") from None


def _import(path: Path, text: str) -> Any:
    """The module imported (from a file named by its hash: Triton reads kernel source from files); whatever its
    top-level code raises, sys.exit included, is a LoadError. Without a GPU its kernels run in Triton's CPU
    interpreter, as an exported module's self-check does (evo.launch.interpreter), with one warning saying so."""
    import warnings

    from evo.evaluate.modules import load_source
    from evo.launch.interpreter import NO_GPU_LINE, NoDevice, use_interpreter_without_gpu

    try:
        if use_interpreter_without_gpu():
            warnings.warn(NO_GPU_LINE, RuntimeWarning, stacklevel=3)  # at the caller's load() / load_zoo()
    except NoDevice as e:
        raise LoadError(f"{path}: {e}") from None
    try:
        return load_source(text)
    except SystemExit as e:
        raise LoadError(f"{path}: importing it called sys.exit({e.code!r})") from None
    except Exception as e:
        why = " ".join(str(e).split())[:300]
        raise LoadError(f"{path}: importing it failed ({type(e).__name__}{': ' + why if why else ''})") from None


def _read_module(path: Path, why: str) -> str:
    """The text of a module file, refused by size before it is read (a huge file given by mistake must not fill
    memory; `why` says what size to expect) and in one line when it cannot be read."""
    from evo.experiment.bounded_read import TooLarge, read_text_bounded

    try:
        return read_text_bounded(path, MAX_MODULE_BYTES, why)
    except TooLarge as e:
        raise LoadError(f"{path}: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LoadError(f"{path}: cannot read it ({e})") from None


def as_torch_op(entry: Callable[..., Any], operator: Any, tag: str) -> Callable[..., Any]:
    """`entry` (a rendered module's entry function) as a custom op `evo::<operator>_<tag>` with the operator's
    schema and fake implementation; the returned callable is the op under torch.compile and `entry` itself in
    eager code. It takes `out=` as the entry does (README's promise): eager calls write into it without allocating,
    compiled ones copy the op's result into it."""
    import torch

    if not operator.torch_schema:
        raise LoadError(f"operator {operator.name!r} declares no torch op schema")
    ident = re.sub(r"\W", "_", operator.name)  # gemm+bias+gelu -> gemm_bias_gelu: an op name is an identifier
    name = f"evo::{ident}_{tag}"
    if name in _LOADED:
        return _LOADED[name]

    from evo.launch.first_call import FirstCalls

    first = FirstCalls()  # a signature's first call (its plan's workspace) outside any CUDA graph pool: see there

    def impl(*args: Any) -> Any:  # a fresh contiguous result, as the fake implementation promises
        out = operator.empty_output(*args)  # the caller's: in the graph's pool where one expects its outputs
        return first.run(lambda: operator.call_into(entry, *args, out=out), args)

    # an operator that writes into an argument (a KV cache) declares it, as its schema marks it `Tensor(a!)`:
    # torch.compile then lets the op write it in place, and CUDA graphs capture that, without copies
    mutated = tuple(getattr(operator, "mutates_args", ()))
    op = torch.library.custom_op(name, impl, mutates_args=mutated, schema=operator.torch_schema)
    op.register_fake(operator.empty_output)
    is_compiling = torch.compiler.is_compiling
    eager = operator.eager_entry(entry)

    def dispatch(*args: Any, out: Any = None) -> Any:
        if out is None:
            return op(*args) if is_compiling() else eager(*args)
        if is_compiling():  # the op's schema returns a fresh tensor: traced as the op, then copied into `out`
            return out.copy_(op(*args))
        return operator.call_into(entry, *args, out=out)  # eager: the launcher writes into `out`, allocating nothing

    dispatch.__name__ = dispatch.__qualname__ = f"{ident}_{tag}"
    dispatch.__doc__ = entry.__doc__
    dispatch.op, dispatch.entry, dispatch.operator = op, entry, operator.name  # type: ignore[attr-defined]
    _LOADED[name] = dispatch
    return dispatch


def _export(run: Path, shape: str | tuple[int, ...] | None, dtype: str | None) -> str:
    from evo.experiment.config import parse_shape
    from evo.experiment.rundir import RunDir
    from evo.store.sqlite import Store
    from evo.surface.export import ExportError, export_all, export_one

    rd = RunDir(run)
    if not rd.exists():
        raise LoadError(f"{run}: not a run directory (no {rd.store.name} in it)")
    try:
        sizes = parse_shape(shape) if isinstance(shape, str) else shape
        with Store(rd.store, readonly=True) as store:
            return export_all(store)[0] if sizes is None else export_one(store, tuple(sizes), dtype)[0]
    except (ExportError, ValueError) as e:
        raise LoadError(f"{run}: {e}") from None

