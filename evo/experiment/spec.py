"""The experiment specification: what to search, how, for how long, and where results go.

These frozen dataclasses are what the engine runs; `evo.experiment.config` loads and validates them from YAML.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evo.problem import Problem

__all__ = ["Experiment", "Budget", "ExecutorSpec", "DescriptorSpec", "EvaluationSpec", "EmitterSpec", "MemorySpec",
           "DEFAULT_EMITTER_SPECS", "OBJECTIVES"]

# Which clock is the fitness (as evo.store.record.OBJECTIVES, which sits below this module and cannot import it):
# "call" is what a user calling the kernel in an eager loop sees (host launch cost included), "gpu" the GPU time
# of one launch alone. "call" comes first: it is the default.
OBJECTIVES = ("call", "gpu")


@dataclass(frozen=True)
class Budget:
    """Limits per problem; the search of a problem stops at the first one reached (None = no limit).

    `wall_s` counts from the problem's first measured candidate (one that reached a GPU worker), not from before
    the workers were ready. `min_evaluations` is a floor: wall time and stagnation do not end a problem before it
    has that many evaluations, unless its space is exhausted (no untried genome is left to propose); the
    evaluations limit and `sol` still do. The floor never exceeds the evaluations limit (`floor`)."""

    evaluations: int | None = 200
    wall_s: float | None = None
    stagnation: int | None = None  # evaluations without a new best beyond the noise margin
    sol: float | None = None  # stop once the elite reaches this share of the speed-of-light floor (GPU runs)
    min_evaluations: int = 24

    @property
    def floor(self) -> int:
        """The evaluations a problem gets before wall time or stagnation may end it."""
        return self.min_evaluations if self.evaluations is None else min(self.min_evaluations, self.evaluations)


@dataclass(frozen=True)
class ExecutorSpec:
    """Where work runs. kind: "ray" (embedded local instance, or `address` to join a cluster),
    "local" (in-process, for debugging), or "smoke" (CPU interpreter, no GPU: fitness is not a timing)."""

    kind: str = "ray"
    address: str | None = None
    gpus: int | None = None  # GPU workers; None = every visible GPU
    compile_workers: int | None = None  # CPU compile tasks in flight; None = number of CPUs
    dashboard: bool = False


@dataclass(frozen=True)
class DescriptorSpec:
    name: str
    edges: tuple[float, ...] | None = None  # None: the genome family's default bins


@dataclass(frozen=True)
class EvaluationSpec:
    reps: int = 30  # timed repetitions (fewer when a kernel is slow, see evo.evaluate.timing)
    warmup: int = 3
    budget_ms: float = 400.0  # GPU time the timing of one candidate (with its baseline) aims at
    timeout_s: float = 60.0  # per candidate on the GPU; the worker is replaced after it
    compile_timeout_s: float = 120.0
    noise_margin: float = 0.01  # relative: a challenger must beat an elite by this to replace it
    objective: str = "call"  # the fitness's clock (OBJECTIVES): per-call time of eager calls, or GPU time

    def __post_init__(self) -> None:
        if self.reps < 1 or self.warmup < 0 or min(self.budget_ms, self.timeout_s, self.compile_timeout_s) <= 0:
            raise ValueError(f"bad evaluation settings: {self}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"evaluation objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")


@dataclass(frozen=True)
class EmitterSpec:
    """One emitter by registry name (evo.search.emitters) and its settings."""

    name: str
    settings: tuple[tuple[str, Any], ...] = ()


DEFAULT_EMITTER_SPECS = tuple(EmitterSpec(n) for n in ("variation", "guided", "exploit", "restart"))


@dataclass(frozen=True)
class MemorySpec:
    """The results database shared by runs on this machine (evo.store.shared)."""

    enabled: bool = True
    db: str | None = None  # None: $EVO_RESULTS_DB, else <user cache dir>/evo/results.sqlite
    seed: int = 8  # at most this many elites of the nearest problems measured before seed a problem
    reuse: bool = True  # serve a kernel measured before on this GPU model and versions instead of re-measuring


@dataclass(frozen=True)
class Experiment:
    name: str
    operator: str
    problems: tuple[Problem, ...]
    genome: dict[str, list[Any]] = field(default_factory=dict)  # gene -> allowed values
    descriptors: tuple[DescriptorSpec, ...] = ()
    mutators: dict[str, float] = field(default_factory=lambda: {"mutate": 0.6, "mutate_multi": 0.2,
                                                                 "crossover_uniform": 0.1, "crossover_group": 0.1})
    selection: str = "uniform"  # or "curiosity": biased to cells that recently improved
    emitters: tuple[EmitterSpec, ...] = DEFAULT_EMITTER_SPECS  # proposal strategies sharing the archive
    scheduler: str = "bandit"  # shares the proposals among the emitters by the improvements each caused
    initial_random: int = 16  # random valid genomes in the first population (besides the family's seeds)
    seeds: bool = True  # the genome family's hand-picked seeds in the first population (off: a blind start)
    transfer: bool = True  # seed each problem with the elites of problems already searched
    budget: Budget = Budget()
    seed: int = 0
    executor: ExecutorSpec = ExecutorSpec()
    evaluation: EvaluationSpec = EvaluationSpec()
    output: str = "runs"
    memory: MemorySpec = MemorySpec()
    source: str = ""  # the YAML text the experiment was loaded from (copied into the run directory)
