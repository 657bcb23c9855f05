"""Limits on what an experiment may ask for, checked before any work starts.

A YAML file is read with bounds (size, nesting, aliases expanded) so that a hostile or mistyped document fails in
one line instead of exhausting memory or the stack; each count in an experiment has a ceiling beyond which a run
would start and then stall (a billion initial genomes, a million actors); and a problem's tensors must be
indexable by the kernels, which compute offsets in 32 bits.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

__all__ = ["LimitError", "MAX_TEXT_BYTES", "MAX_DEPTH", "MAX_NODES", "MAX_DIGITS", "CEILINGS", "MAX_ELEMENTS",
           "MAX_CELLS", "MAX_PROBLEMS", "load_yaml_bounded", "check_digits", "check_ceiling", "check_indexable",
           "check_path_text", "check_smoke_dtypes"]

MAX_TEXT_BYTES = 1 << 20  # an experiment is a page of YAML; a megabyte is not one
MAX_DEPTH = 64  # nesting of mappings and lists (an experiment needs about 5)
MAX_NODES = 200_000  # nodes of the document with every alias expanded (a "billion laughs" has 10^9)
# digits of an integer: the largest setting (a seed below 2**63) has 19; Python refuses to read more than 4,300
MAX_DIGITS = 100
_INT_TAG = "tag:yaml.org,2002:int"
MAX_ELEMENTS = 2**31 - 1  # per tensor: rendered kernels compute offsets in int32
MAX_CELLS = 1_000_000  # archive cells over all descriptors
MAX_PROBLEMS = 10_000

# key path -> the largest value a run can use without stalling or overflowing a timer
CEILINGS: dict[str, float] = {
    "initial_random": 10_000,
    "evaluation.reps": 100_000,
    "evaluation.warmup": 10_000,
    "evaluation.timeout_s": 7 * 86_400,
    "evaluation.compile_timeout_s": 7 * 86_400,
    "executor.gpus": 4_096,
    "executor.compile_workers": 65_536,
    "budget.wall_s": 10 * 365 * 86_400,
    "seed": 2**63 - 1,
}
SMOKE_MAX_WORKERS = 64  # a smoke run's "GPU workers" are CPU processes on this machine


class LimitError(ValueError):
    """Input beyond a limit; the message is one line (without the file name, which the caller adds)."""


def load_yaml_bounded(text: str, loader_cls: type[yaml.SafeLoader]) -> Any:
    """Parse one YAML document with `loader_cls`, refusing text over MAX_TEXT_BYTES, nesting deeper than
    MAX_DEPTH and documents whose aliases expand to more than MAX_NODES nodes. Raises yaml.YAMLError for
    malformed YAML and LimitError for these limits."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise LimitError(f"is larger than {MAX_TEXT_BYTES >> 10} KiB; an experiment file is a page of YAML")
    loader = loader_cls(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise LimitError(f"nests mappings or lists more than {MAX_DEPTH} deep") from None
        if node is None:
            return None
        _check_shape(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_shape(root: yaml.Node) -> None:
    """Depth and expanded size of a composed node graph, without expanding it (aliases share nodes)."""
    sizes: dict[int, int] = {}
    # iterative post-order walk: (node, depth, children done)
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    on_path: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise LimitError(f"nests mappings or lists more than {MAX_DEPTH} deep")
        children = _children(node)
        if done:
            on_path.discard(id(node))
            size = 1 + sum(sizes[id(c)] for c in children)
            if size > MAX_NODES:
                raise LimitError(f"expands to more than {MAX_NODES} values (YAML aliases repeat what they name)")
            sizes[id(node)] = size
            continue
        if id(node) in sizes:
            continue
        if id(node) in on_path:
            raise LimitError("holds a recursive YAML alias (a node that contains itself)")
        if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG:
            check_digits(node.value, f"line {node.start_mark.line + 1}")
        on_path.add(id(node))
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def check_digits(text: str, where: str) -> None:
    """LimitError (one line, naming `where`) when the integer written as `text` has more than MAX_DIGITS digits:
    no setting needs them, and Python's int() refuses more than 4,300 with a ValueError that reads as a crash."""
    digits = sum(c.isdigit() for c in text)
    if digits > MAX_DIGITS:
        raise LimitError(f"holds a number of {digits:,} digits ({where}); no setting needs more than {MAX_DIGITS}")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_ceiling(path: str, value: float | None, smoke: bool = False) -> str | None:
    """A one-line complaint when `value` at key `path` is beyond its ceiling, else None."""
    if value is None:
        return None
    ceiling = CEILINGS.get(path)
    if path == "executor.gpus" and smoke:
        ceiling = SMOKE_MAX_WORKERS
        if value > ceiling:
            return (f"at most {ceiling} for a smoke run (its workers are CPU processes on this machine); "
                    f"got {value}")
    if ceiling is not None and value > ceiling:
        return f"at most {ceiling:,}; got {value:,}"
    return None


def check_indexable(op: Any, problem: Any) -> str | None:
    """A one-line complaint when a tensor of `problem` (an input or the result) has more elements than the
    kernels can index, else None. Shapes come from the operator's `tensor_shapes` (no torch), else from its inputs
    made on torch's meta device (no memory, but torch's import: seconds)."""
    shapes = op.tensor_shapes(problem) if hasattr(op, "tensor_shapes") else None
    if shapes is None:
        shapes = _meta_shapes(op, problem)
    for shape in shapes:
        elements = math.prod(shape)
        if elements > MAX_ELEMENTS:
            return (f"problem {problem.key} needs a {'x'.join(str(s) for s in shape)} tensor of {elements:,} "
                    f"elements; the kernels index at most {MAX_ELEMENTS:,} (2^31 - 1) elements per tensor")
    return None


def _meta_shapes(op: Any, problem: Any) -> list[tuple[int, ...]]:
    """The shapes of an operator's inputs and result made on torch's meta device ([] when it cannot make them)."""
    try:
        inputs = op.make_inputs(problem, 0, device="meta")
    except Exception:  # an operator whose inputs cannot be made on the meta device: nothing to check here
        return []
    tensors = [t for t in inputs if hasattr(t, "numel")]
    try:
        out = op.reference(*inputs)
        tensors += [out] if hasattr(out, "numel") else []
    except Exception:  # a reference that cannot run on meta tensors: its inputs still bound it
        pass
    return [tuple(t.shape) for t in tensors]


def check_path_text(text: str) -> str | None:
    """A complaint when a path holds control characters (they would end up in directory names), else None."""
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return "expected a folder path without control characters"
    return None


def check_smoke_dtypes(problems: Any) -> str | None:
    """The CPU interpreter computes bf16 wrongly: a smoke run would silently check fp16 instead. A complaint
    naming the first bf16 problem, else None."""
    for p in problems:
        if p.dtype == "bf16":
            return (f"problem {p.key}: a smoke run cannot check bf16 (the CPU interpreter computes it wrongly); use "
                    f"fp16 or fp32 with executor kind smoke")
    return None
