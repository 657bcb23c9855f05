"""Loading an experiment from YAML into a validated, frozen `Experiment`.

Everything is checked before any work starts: an unknown key, a wrong type, an impossible value, an
unknown operator, gene or descriptor each raises `ConfigError`, whose message is one line naming the
file, the key path (e.g. `budget.evaluations`) and what was expected. The schema is documented in
README.md and in the comments of experiments/*.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from evo.experiment import limits
from evo.experiment.oneline import one_line
from evo.experiment.spec import (
    Budget,
    DescriptorSpec,
    EmitterSpec,
    EvaluationSpec,
    ExecutorSpec,
    Experiment,
    MemorySpec,
)
from evo.problem import DTYPES, HOPPER, Problem

__all__ = ["ConfigError", "load_experiment", "parse_experiment", "parse_shape", "EXECUTOR_KINDS"]

EXECUTOR_KINDS = ("ray", "local", "smoke")
_TOP_KEYS = ("name", "operator", "problems", "genome", "descriptors", "mutators", "selection", "initial_random",
             "transfer", "budget", "seed", "executor", "evaluation", "output", "emitters", "scheduler", "memory",
             "seeds")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_MISSING = object()


class ConfigError(ValueError):
    """A bad experiment file. The message is one line: `FILE: KEY.PATH: what was expected, got what`."""

    def __init__(self, file: str, path: str, message: str) -> None:
        self.file, self.path = file, path
        text = f"{file}: {path}: {message}" if path else f"{file}: {message}"
        super().__init__(one_line(text))  # one line, whatever the message held


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses repeated keys (plain PyYAML silently keeps the last one)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def parse_shape(value: Any) -> tuple[int, ...]:
    """A shape from YAML or the command line: "4096x4096x4096", [4096, 4096, 4096] or 4096."""
    if isinstance(value, bool):
        raise ValueError(f"shape {value!r} is not a shape")
    if isinstance(value, int):
        value = [value]
    if isinstance(value, (list, tuple)):
        if not value or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            raise ValueError(f"shape {list(value)!r} is not a list of positive integers")
        return tuple(value)
    if isinstance(value, str):
        return Problem.parse_shape(value.strip())
    raise ValueError(f"shape {value!r} is neither text like '4096x4096x4096' nor a list of integers")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Checker:
    """Typed accessors that raise ConfigError naming the file and the key path."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, message: str) -> ConfigError:
        return ConfigError(self.file, path, message)

    def mapping(self, value: Any, path: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping with keys {', '.join(allowed)}; got {_describe(value)}")
        for key in value:
            if key not in allowed:
                where = f"{path}.{key}" if path else str(key)
                raise self.fail(where, f"unknown key; expected one of {', '.join(allowed)}")
        for key in required:
            if key not in value:
                raise self.fail(f"{path}.{key}" if path else key, "is required")
        return value

    def integer(self, value: Any, path: str, low: int | None = None, none_ok: bool = False) -> int | None:
        if value is None and none_ok:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and (low is None or value >= low)
        if not ok:
            bound = f" >= {low}" if low is not None else ""
            raise self.fail(path, f"expected an integer{bound}{' or null' if none_ok else ''}; got {_describe(value)}")
        self.ceiling(path, value)
        return int(value)

    def number(self, value: Any, path: str, low: float, high: float | None = None, low_open: bool = True,
               none_ok: bool = False) -> float | None:
        if value is None and none_ok:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
        ok = ok and (value > low if low_open else value >= low) and (high is None or value < high)
        if not ok:
            rng = f"{'>' if low_open else '>='} {low}" + (f" and < {high}" if high is not None else "")
            raise self.fail(path, f"expected a number {rng}{' or null' if none_ok else ''}; got {_describe(value)}")
        self.ceiling(path, value)
        return float(value)

    def ceiling(self, path: str, value: float, smoke: bool = False) -> None:
        problem = limits.check_ceiling(path, value, smoke)
        if problem:
            raise self.fail(path, problem)

    def boolean(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(path, f"expected true or false; got {_describe(value)}")
        return value

    def string(self, value: Any, path: str, none_ok: bool = False) -> str | None:
        if value is None and none_ok:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, f"expected a non-empty string{' or null' if none_ok else ''}; got {_describe(value)}")
        return value

    def choice(self, value: Any, path: str, choices: list[str] | tuple[str, ...], what: str = "") -> str:
        if not isinstance(value, str) or value not in choices:
            raise self.fail(path, f"unknown {what or 'value'} {_describe(value)}; expected one of {', '.join(choices)}")
        return value

    def listing(self, value: Any, path: str) -> list:
        if not isinstance(value, list) or not value:
            raise self.fail(path, f"expected a non-empty list; got {_describe(value)}")
        return value


def _registry_names(module: str, fallback: tuple[str, ...]) -> tuple[str, ...]:
    """Names from a registry module's `names()`, or `fallback` while that registry does not exist yet."""
    import importlib

    try:
        names = importlib.import_module(module).names
    except (ImportError, AttributeError):
        return fallback
    return tuple(names())


def _default_mutators() -> dict[str, float]:
    return Experiment(name="", operator="", problems=()).mutators


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment file; raises ConfigError (one line) on any problem."""
    path = Path(path)
    file = str(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(file, "", "no such file") from None
    except IsADirectoryError:
        raise ConfigError(file, "", "is a directory, not an experiment file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(file, "", f"cannot be read ({e})") from None
    return parse_experiment(text, file, default_name=path.stem)


def parse_experiment(text: str, file: str = "<experiment>", default_name: str = "experiment") -> Experiment:
    """Validate experiment YAML `text`; `file` names it in error messages."""
    try:
        data = limits.load_yaml_bounded(text, _UniqueKeyLoader)
    except limits.LimitError as e:
        raise ConfigError(file, "", str(e)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(e, "problem", None) or str(e)
        raise ConfigError(file, "", f"is not valid YAML: {where}{what}") from None
    c = _Checker(file)
    d = c.mapping(data, "", _TOP_KEYS, required=("operator", "problems"))

    name = d.get("name", default_name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise c.fail("name", f"expected letters, digits, '_', '-' or '.' (it names the run directory); "
                             f"got {_describe(name)}")

    import operators

    op_name = c.choice(d["operator"], "operator", operators.names(), "operator")
    try:
        op = operators.get(op_name)
    except ImportError as e:
        raise c.fail("operator", f"operator {op_name!r} cannot be loaded: {e}") from None
    executor = _executor(c, d.get("executor", {}))
    problems = _problems(c, d["problems"], op)
    smoke_dtype = limits.check_smoke_dtypes(problems) if executor.kind == "smoke" else None
    if smoke_dtype:
        raise c.fail("problems", smoke_dtype)
    genome = _genome(c, d.get("genome", {}), op)
    if genome:
        op = operators.get(op_name, genome)
    _check_feasible(c, op, problems, bool(genome))
    descriptors = _descriptors(c, d.get("descriptors", []), op)

    mutators = dict(_default_mutators())
    mutator_names = _registry_names("evo.mutators", tuple(mutators))
    if "mutators" in d:
        m = c.mapping(d["mutators"], "mutators", mutator_names)
        if not m:
            raise c.fail("mutators", f"expected at least one of {', '.join(mutator_names)}")
        mutators = {k: c.number(v, f"mutators.{k}", 0.0) for k, v in m.items()}

    selection = c.choice(d.get("selection", Experiment.selection), "selection",
                         _registry_names("evo.search.selection", ("uniform", "curiosity")), "selection")
    return Experiment(
        name=name,
        operator=op_name,
        problems=problems,
        genome=genome,
        descriptors=descriptors,
        mutators=mutators,
        selection=selection,
        initial_random=c.integer(d.get("initial_random", Experiment.initial_random), "initial_random", 0),
        transfer=c.boolean(d.get("transfer", Experiment.transfer), "transfer"),
        seeds=c.boolean(d.get("seeds", Experiment.seeds), "seeds"),
        budget=_budget(c, d.get("budget", {})),
        seed=c.integer(d.get("seed", Experiment.seed), "seed", 0),
        executor=executor,
        evaluation=_evaluation(c, d.get("evaluation", {})),
        output=_output(c, d.get("output", Experiment.output)),
        emitters=_emitters(c, d.get("emitters", None)),
        scheduler=c.choice(d.get("scheduler", Experiment.scheduler), "scheduler",
                           _registry_names("evo.search.emitters.scheduler", ("bandit",)), "scheduler"),
        memory=_memory(c, d.get("memory", {})),
        source=text,
    )


def _output(c: _Checker, node: Any) -> str:
    text = c.string(node, "output")
    if limits.check_path_text(text):
        raise c.fail("output", f"{limits.check_path_text(text)}; got {_describe(text)}")
    return text


def _problems(c: _Checker, node: Any, op: Any) -> tuple[Problem, ...]:
    """`problems` is a mapping {shapes: [...], dtypes: [...]} (every shape in every dtype) or a list of them."""
    groups = [(node, "problems")] if isinstance(node, dict) else \
        [(g, f"problems[{i}]") for i, g in enumerate(c.listing(node, "problems"))]
    out: dict[str, Problem] = {}
    for group, path in groups:
        g = c.mapping(group, path, ("shapes", "dtypes"), required=("shapes", "dtypes"))
        dtypes = c.listing(g["dtypes"], f"{path}.dtypes")
        for j, dtype in enumerate(dtypes):
            c.choice(dtype, f"{path}.dtypes[{j}]", [t for t in op.dtypes if t in DTYPES], f"dtype for {op.name}")
        for i, shape in enumerate(c.listing(g["shapes"], f"{path}.shapes")):
            where = f"{path}.shapes[{i}]"
            try:
                sizes = parse_shape(shape)
            except ValueError as e:
                raise c.fail(where, f"{e}; expected e.g. '{'x'.join(['4096'] * len(op.dims))}' "
                                    f"({'x'.join(op.dims)})") from None
            for dtype in dtypes:
                try:
                    problem = op.problem(sizes, dtype)
                except ValueError as e:
                    raise c.fail(where, str(e)) from None
                if problem.key in out:
                    raise c.fail(where, f"problem {problem.key} is listed twice")
                too_big = limits.check_indexable(op, problem)
                if too_big:
                    raise c.fail(where, too_big)
                out[problem.key] = problem
                if len(out) > limits.MAX_PROBLEMS:
                    raise c.fail("problems", f"more than {limits.MAX_PROBLEMS} problems; split the experiment")
    return tuple(out.values())



def _genome(c: _Checker, node: Any, op: Any) -> dict[str, list[Any]]:
    """`genome` restricts genes: {gene: [allowed values]}; a single value pins the gene."""
    if node is None:
        return {}
    genes = op.family.genes
    node = c.mapping(node, "genome", tuple(genes))
    out: dict[str, list[Any]] = {}
    for name, allowed in node.items():
        values = allowed if isinstance(allowed, list) else [allowed]
        if not values:
            raise c.fail(f"genome.{name}", f"expected a non-empty list of values from {list(genes[name].values)}")
        for i, v in enumerate(values):
            # 1 == True in Python: keep booleans and integers apart so `true` never passes for 1
            if not any(v == d and type(v) is type(d) for d in genes[name].values):
                where = f"genome.{name}[{i}]" if isinstance(allowed, list) else f"genome.{name}"
                raise c.fail(where, f"{_describe(v)} is not in the domain of gene {name}: {list(genes[name].values)}")
        out[name] = list(values)
    return out


def _check_feasible(c: _Checker, op: Any, problems: tuple[Problem, ...], restricted: bool) -> None:
    """With restricted genes, each problem must still have a valid genome (checked for a Hopper target)."""
    if not restricted:
        return
    from genomes.base import InvalidGenome

    rng = np.random.default_rng(0)
    for p in problems:
        if op.family.seeds(p, HOPPER):
            continue
        for _ in range(16):
            try:
                op.family.random(rng, p, HOPPER)
                break
            except InvalidGenome:
                continue
        else:
            raise c.fail("genome", f"no valid genome remains for problem {p.key} under these restrictions")


def _descriptors(c: _Checker, node: Any, op: Any) -> tuple[DescriptorSpec, ...]:
    """`descriptors`: names, or {name, edges} mappings; empty means the search's default choice."""
    if node is None or node == []:
        return ()
    available = op.family.descriptors()
    out = []
    for i, item in enumerate(c.listing(node, "descriptors")):
        path = f"descriptors[{i}]"
        edges = None
        if isinstance(item, dict):
            item = c.mapping(item, path, ("name", "edges"), required=("name",))
            name, path_name = item["name"], f"{path}.name"
            if item.get("edges") is not None:
                edges = _edges(c, item["edges"], f"{path}.edges")
        else:
            name, path_name = item, path
        c.choice(name, path_name, sorted(available), f"descriptor for {op.name}")
        if any(d.name == name for d in out):
            raise c.fail(path_name, f"descriptor {name!r} is listed twice")
        out.append(DescriptorSpec(name, edges))
    cells = 1
    for spec in out:
        cells *= len(spec.edges or available[spec.name].edges)
    if cells > limits.MAX_CELLS:
        raise c.fail("descriptors", f"the archive would have about {cells:,} cells; at most {limits.MAX_CELLS:,}")
    return tuple(out)


def _edges(c: _Checker, node: Any, path: str) -> tuple[float, ...]:
    values = c.listing(node, path)
    if len(values) < 2:
        raise c.fail(path, "expected at least two bin edges")
    edges = tuple(c.number(v, f"{path}[{i}]", -np.inf) for i, v in enumerate(values))
    if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise c.fail(path, f"bin edges must increase strictly; got {list(values)}")
    return edges


def _sub(c: _Checker, node: Any, path: str, allowed: tuple[str, ...]) -> Callable[[str, Any], Any]:
    m = c.mapping({} if node is None else node, path, allowed)
    return lambda key, default: m.get(key, default)


def _budget(c: _Checker, node: Any) -> Budget:
    get = _sub(c, node, "budget", ("evaluations", "wall_s", "stagnation", "sol"))
    b = Budget(
        evaluations=c.integer(get("evaluations", Budget.evaluations), "budget.evaluations", 1, none_ok=True),
        wall_s=c.number(get("wall_s", Budget.wall_s), "budget.wall_s", 0.0, none_ok=True),
        stagnation=c.integer(get("stagnation", Budget.stagnation), "budget.stagnation", 1, none_ok=True),
        sol=c.number(get("sol", Budget.sol), "budget.sol", 0.0, 1.0, none_ok=True),
    )
    if b.evaluations is None and b.wall_s is None and b.stagnation is None:
        raise c.fail("budget", "at least one of evaluations, wall_s or stagnation must be set (else it never stops; "
                               "sol alone may never be reached)")
    return b


def _executor(c: _Checker, node: Any) -> ExecutorSpec:
    get = _sub(c, node, "executor", ("kind", "address", "gpus", "compile_workers", "dashboard"))
    kind = c.choice(get("kind", ExecutorSpec.kind), "executor.kind", EXECUTOR_KINDS, "executor kind")
    address = c.string(get("address", None), "executor.address", none_ok=True)
    if address is not None and kind == "local":
        raise c.fail("executor.address", "a local executor runs in this process and joins no cluster; use kind "
                                         "ray (or smoke, to try a cluster without GPUs)")
    gpus = c.integer(get("gpus", None), "executor.gpus", 1, none_ok=True)
    if gpus is not None:
        c.ceiling("executor.gpus", gpus, smoke=kind == "smoke")
    return ExecutorSpec(
        kind=kind,
        address=address,
        gpus=gpus,
        compile_workers=c.integer(get("compile_workers", None), "executor.compile_workers", 1, none_ok=True),
        dashboard=c.boolean(get("dashboard", False), "executor.dashboard"),
    )


def _evaluation(c: _Checker, node: Any) -> EvaluationSpec:
    get = _sub(c, node, "evaluation", ("reps", "warmup", "timeout_s", "compile_timeout_s", "noise_margin"))
    e = EvaluationSpec
    return EvaluationSpec(
        reps=c.integer(get("reps", e.reps), "evaluation.reps", 1),
        warmup=c.integer(get("warmup", e.warmup), "evaluation.warmup", 0),
        timeout_s=c.number(get("timeout_s", e.timeout_s), "evaluation.timeout_s", 0.0),
        compile_timeout_s=c.number(get("compile_timeout_s", e.compile_timeout_s), "evaluation.compile_timeout_s",
                                   0.0),
        noise_margin=c.number(get("noise_margin", e.noise_margin), "evaluation.noise_margin", 0.0, 1.0,
                              low_open=False),
    )


def _emitters(c: _Checker, node: Any) -> tuple[EmitterSpec, ...]:
    """`emitters`: names, or {name, ...settings} mappings; each is built once here so that a bad setting fails
    now (evo.search.emitters validates its own settings)."""
    if node is None:
        return Experiment.emitters
    import importlib

    registry = importlib.import_module("evo.search.emitters")
    out: list[EmitterSpec] = []
    for i, item in enumerate(c.listing(node, "emitters")):
        path = f"emitters[{i}]"
        if isinstance(item, dict):
            if "name" not in item:
                raise c.fail(f"{path}.name", "is required")
            name, settings = item["name"], {k: v for k, v in item.items() if k != "name"}
        else:
            name, settings = item, {}
        c.choice(name, path, registry.names(), "emitter")
        if any(e.name == name for e in out):
            raise c.fail(path, f"emitter {name!r} is listed twice")
        try:
            registry.get(name, settings)
        except ValueError as e:
            raise c.fail(path, str(e)) from None
        out.append(EmitterSpec(name, tuple(sorted(settings.items()))))
    return tuple(out)


def _memory(c: _Checker, node: Any) -> MemorySpec:
    """`memory`: false turns the shared results database off; else {db, seed, reuse}."""
    if node is False:
        return MemorySpec(enabled=False)
    get = _sub(c, node, "memory", ("db", "seed", "reuse"))
    m = MemorySpec
    return MemorySpec(db=c.string(get("db", m.db), "memory.db", none_ok=True),
                      seed=c.integer(get("seed", m.seed), "memory.seed", 0),
                      reuse=c.boolean(get("reuse", m.reuse), "memory.reuse"))
