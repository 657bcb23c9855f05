"""Loading an experiment from YAML into a validated, frozen `Experiment`.

Everything is checked before any work starts: an unknown key, a wrong type, an impossible value, an
unknown operator, gene or descriptor each raises `ConfigError`, whose message is one line naming the
file, the key path (e.g. `budget.evaluations`) and what was expected. The schema is documented in
docs/experiments.md and in the comments of experiments/*.yaml.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from evo.experiment import limits
from evo.experiment.bounded_read import TooLarge, read_text_bounded
from evo.experiment.spec import (
    OBJECTIVES,
    Budget,
    DescriptorSpec,
    EmitterSpec,
    EvaluationSpec,
    ExecutorSpec,
    Experiment,
    MemorySpec,
)
from evo.experiment.yaml_reader import Checker, ConfigError, UniqueKeyLoader, describe
from evo.problem import DTYPES, HOPPER, INTERPRETED_HOPPER, Problem, Target

__all__ = ["ConfigError", "load_experiment", "parse_experiment", "parse_shape", "EXECUTOR_KINDS"]

EXECUTOR_KINDS = ("ray", "local", "smoke")
_TOP_KEYS = ("name", "operator", "problems", "genome", "descriptors", "mutators", "selection", "initial_random",
             "transfer", "budget", "seed", "executor", "evaluation", "output", "emitters", "scheduler", "memory",
             "seeds")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_MISSING = object()


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


def load_experiment(path: str | Path, check_feasible: bool = True) -> Experiment:
    """Read and validate an experiment file; raises ConfigError (one line) on any problem."""
    path = Path(path)
    file = str(path)
    try:
        text = read_text_bounded(path, limits.MAX_TEXT_BYTES)  # /dev/zero is refused, not read into memory
    except TooLarge as e:
        raise ConfigError(file, "", str(e)) from None
    except FileNotFoundError:
        raise ConfigError(file, "", "no such file") from None
    except IsADirectoryError:
        raise ConfigError(file, "", "is a directory, not an experiment file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(file, "", f"cannot be read ({e})") from None
    return parse_experiment(text, file, default_name=path.stem, check_feasible=check_feasible)


def parse_experiment(text: str, file: str = "<experiment>", default_name: str = "experiment",
                     check_feasible: bool = True) -> Experiment:
    """Validate experiment YAML `text`; `file` names it in error messages. `check_feasible=False` skips drawing a
    valid genome per problem under the genome restrictions (a run directory's own copy, checked when the run
    started: on 10,000 problems the draws took about 20 s of `evo status` after a Ctrl-C)."""
    try:
        data = limits.load_yaml_bounded(text, UniqueKeyLoader)
    except limits.LimitError as e:
        raise ConfigError(file, "", str(e)) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = getattr(e, "problem", None) or str(e)
        raise ConfigError(file, "", f"is not valid YAML: {where}{what}") from None
    c = Checker(file)
    d = c.mapping(data, "", _TOP_KEYS, required=("operator", "problems"))

    name = d.get("name", default_name)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise c.fail("name", f"expected letters, digits, '_', '-' or '.' (it names the run directory); "
                             f"got {describe(name)}")

    import operators

    op_name = d["operator"]
    if not isinstance(op_name, str):
        c.choice(op_name, "operator", operators.names(), "operator")  # refused, naming the known operators
    c.choice(op_name.split("+")[0], "operator", operators.names(), "operator")
    try:
        op = operators.get(op_name)
    except ImportError as e:
        raise c.fail("operator", f"operator {op_name!r} cannot be loaded: {e}") from None
    except ValueError as e:  # options the operator does not take, e.g. gemm+bias+gleu
        raise c.fail("operator", str(e)) from None
    executor = _executor(c, d.get("executor", {}))
    wheres: dict[str, str] = {}
    problems = _problems(c, d["problems"], op, wheres)
    smoke_dtype = limits.check_smoke_dtypes(problems) if executor.kind == "smoke" else None
    if smoke_dtype:
        raise c.fail("problems", smoke_dtype)
    genome = _genome(c, d.get("genome", {}), op)
    if genome:
        op = operators.get(op_name, genome)
    if check_feasible:
        _check_feasible(c, op, problems, bool(genome), INTERPRETED_HOPPER if executor.kind == "smoke" else HOPPER)
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
    experiment = Experiment(
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
    # last: an operator that cannot give its tensors' shapes without torch makes them on torch's meta device, and
    # importing torch takes seconds; every other mistake is refused before that (in well under a second)
    for problem in problems:
        too_big = limits.check_indexable(op, problem)
        if too_big:
            raise c.fail(wheres[problem.key], too_big)
    return experiment


def _output(c: Checker, node: Any) -> str:
    text = c.string(node, "output")
    if limits.check_path_text(text):
        raise c.fail("output", f"{limits.check_path_text(text)}; got {describe(text)}")
    return text


def _problems(c: Checker, node: Any, op: Any, wheres: dict[str, str]) -> tuple[Problem, ...]:
    """`problems` is a mapping {shapes: [...], dtypes: [...]} (every shape in every dtype) or a list of them;
    `wheres` receives each problem's key path (for `_check_indexable`, which runs last)."""
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
                out[problem.key] = problem
                wheres[problem.key] = where
                if len(out) > limits.MAX_PROBLEMS:
                    raise c.fail("problems", f"more than {limits.MAX_PROBLEMS} problems; split the experiment")
    return tuple(out.values())



def _genome(c: Checker, node: Any, op: Any) -> dict[str, list[Any]]:
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
                raise c.fail(where, f"{describe(v)} is not in the domain of gene {name}: {list(genes[name].values)}")
        out[name] = list(values)
    return out


def _check_feasible(c: Checker, op: Any, problems: tuple[Problem, ...], restricted: bool, target: Target) -> None:
    """With restricted genes, each problem must still have a valid genome on `target` (a Hopper GPU, or the CPU
    interpreter of a smoke run, which runs no Gluon); else one line naming the rule the restrictions break."""
    if not restricted:
        return
    from genomes.base import InvalidGenome

    rng = np.random.default_rng(0)
    for p in problems:
        if op.family.seeds(p, target):
            continue
        for _ in range(16):
            try:
                op.family.random(rng, p, target)
                break
            except InvalidGenome:
                continue
        else:
            raise c.fail("genome", f"no valid genome remains for problem {p.key} under these restrictions"
                                   f"{_conflict(op.family, p, target, rng)}")


def _conflict(family: Any, problem: Problem, target: Target, rng: np.random.Generator, draws: int = 200) -> str:
    """The rule that genomes drawn from the restricted domains break: one every draw breaks (e.g. backend gluon with
    memory pointer: "the Gluon rendering holds memory=host_descriptor"), else the one broken most often."""
    counts: dict[str, int] = {}
    for _ in range(draws):
        genome = family.make({name: gene.random(rng) for name, gene in family.genes.items()})
        for reason in set(family.violations(genome, problem, target)):
            counts[reason] = counts.get(reason, 0) + 1
    if not counts:
        return ""
    reason, n = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return f": every genome they allow breaks a rule ({reason})" if n == draws else f" (most often: {reason})"


def _descriptors(c: Checker, node: Any, op: Any) -> tuple[DescriptorSpec, ...]:
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


def _edges(c: Checker, node: Any, path: str) -> tuple[float, ...]:
    values = c.listing(node, path)
    if len(values) < 2:
        raise c.fail(path, "expected at least two bin edges")
    edges = tuple(c.number(v, f"{path}[{i}]", -np.inf) for i, v in enumerate(values))
    if any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise c.fail(path, f"bin edges must increase strictly; got {list(values)}")
    return edges


def _sub(c: Checker, node: Any, path: str, allowed: tuple[str, ...]) -> Callable[[str, Any], Any]:
    m = c.mapping({} if node is None else node, path, allowed)
    return lambda key, default: m.get(key, default)


def _budget(c: Checker, node: Any) -> Budget:
    get = _sub(c, node, "budget", ("evaluations", "wall_s", "stagnation", "sol", "min_evaluations"))
    b = Budget(
        evaluations=c.integer(get("evaluations", Budget.evaluations), "budget.evaluations", 1, none_ok=True),
        wall_s=c.number(get("wall_s", Budget.wall_s), "budget.wall_s", 0.0, none_ok=True),
        stagnation=c.integer(get("stagnation", Budget.stagnation), "budget.stagnation", 1, none_ok=True),
        sol=c.number(get("sol", Budget.sol), "budget.sol", 0.0, 1.0, none_ok=True),
        min_evaluations=c.integer(get("min_evaluations", Budget.min_evaluations), "budget.min_evaluations", 0),
    )
    if "min_evaluations" in (node or {}) and b.evaluations is not None and b.min_evaluations > b.evaluations:
        raise c.fail("budget.min_evaluations", f"{b.min_evaluations} is more than budget.evaluations "
                                               f"({b.evaluations}): the floor must fit in the limit")
    if b.evaluations is None and b.wall_s is None and b.stagnation is None:
        raise c.fail("budget", "at least one of evaluations, wall_s or stagnation must be set (else it never stops; "
                               "sol alone may never be reached)")
    return b


def _executor(c: Checker, node: Any) -> ExecutorSpec:
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


def _evaluation(c: Checker, node: Any) -> EvaluationSpec:
    keys = ("reps", "warmup", "budget_ms", "timeout_s", "compile_timeout_s", "noise_margin", "objective")
    get = _sub(c, node, "evaluation", keys)
    e = EvaluationSpec
    return EvaluationSpec(
        reps=c.integer(get("reps", e.reps), "evaluation.reps", 1),
        warmup=c.integer(get("warmup", e.warmup), "evaluation.warmup", 0),
        budget_ms=c.number(get("budget_ms", e.budget_ms), "evaluation.budget_ms", 0.0),
        timeout_s=c.number(get("timeout_s", e.timeout_s), "evaluation.timeout_s", 0.0),
        compile_timeout_s=c.number(get("compile_timeout_s", e.compile_timeout_s), "evaluation.compile_timeout_s",
                                   0.0),
        noise_margin=c.number(get("noise_margin", e.noise_margin), "evaluation.noise_margin", 0.0, 1.0,
                              low_open=False),
        objective=c.choice(get("objective", e.objective), "evaluation.objective", OBJECTIVES, "objective"),
    )


def _emitters(c: Checker, node: Any) -> tuple[EmitterSpec, ...]:
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


def _memory(c: Checker, node: Any) -> MemorySpec:
    """`memory`: false turns the shared results database off; else {db, seed, reuse}."""
    if node is False:
        return MemorySpec(enabled=False)
    get = _sub(c, node, "memory", ("db", "seed", "reuse"))
    m = MemorySpec
    return MemorySpec(db=c.string(get("db", m.db), "memory.db", none_ok=True),
                      seed=c.integer(get("seed", m.seed), "memory.seed", 0),
                      reuse=c.boolean(get("reuse", m.reuse), "memory.reuse"))
