"""One evaluation of one candidate kernel on one problem: what was run, where, and what came of it."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

__all__ = ["Evaluation", "Status", "STATUSES", "MEASURED", "OBJECTIVES"]

Status = Literal[
    "ok",  # correct and timed
    "invalid",  # rejected before compiling (validity rules)
    "compile_error",  # Triton or ptxas failed
    "out_of_resources",  # shared memory / registers beyond the target, at compile time or launch
    "wrong",  # ran, but the output does not match the reference
    "nan",  # ran, output holds NaN/Inf (including never-written elements)
    "crashed",  # the CUDA context was lost (illegal address, ...), or the worker died
    "timeout",  # the kernel (or its compile) did not finish in time
    "error",  # anything else, with the message
]
STATUSES: tuple[str, ...] = Status.__args__  # type: ignore[attr-defined]
# Statuses that are a property of the kernel on that GPU, so they are served from the store, not re-run.
# "crashed" is not among them: a lost worker (actor death, a host out-of-memory kill) is recorded the same way
# as an illegal address, and one bad moment of the machine must not blacklist a kernel for good.
MEASURED = ("ok", "compile_error", "out_of_resources", "wrong", "nan", "timeout")
# Which clock is a row's fitness: "gpu", the GPU time of one launch (CUDA events, L2 flushed: median_ms), or
# "call", the per-call time of back-to-back eager calls (call_ms: what a Python loop over the kernel sees, host
# launch cost included). Rows stored before the call clock existed were judged by GPU time, hence the default.
# (evo.experiment.spec names the same two: importing it from here would add two import floors.)
OBJECTIVES = ("call", "gpu")


@dataclass
class Evaluation:
    operator: str
    problem_key: str  # Problem.key, e.g. "gemm:4096x4096x4096:bf16"
    problem: str  # Problem.to_json()
    genome: str  # Genome.canonical()
    genome_hash: str
    source_hash: str  # sha256 of the rendered module
    status: str
    reason: str = ""
    gpu: str = ""  # device name, e.g. "NVIDIA H200"; "cpu-interpreter" for smoke runs
    versions: dict[str, str] = field(default_factory=dict)  # triton, torch, cuda
    median_ms: float | None = None
    spread_ms: float | None = None  # inter-quartile range of the timed runs
    times_ms: list[float] = field(default_factory=list)
    baseline: str = ""  # name of the primary baseline, e.g. "cublas"
    baseline_ms: float | None = None
    baseline_spread_ms: float | None = None
    call_ms: float | None = None  # per-call ms of back-to-back eager calls of the kernel (evo.evaluate.clocks)
    baseline_call_ms: float | None = None
    host_us: float | None = None  # host microseconds of one call of the kernel (bursts of calls: evo.evaluate.clocks)
    baseline_host_us: float | None = None
    objective: str = "gpu"  # which clock is this row's fitness (OBJECTIVES)
    max_rel_error: float | None = None
    resources: dict[str, Any] = field(default_factory=dict)  # shared, registers, spills, from compilation
    compile_s: float | None = None
    origin: str = ""  # how the genome was made: seed, random, mutate, crossover, transfer, ...
    parents: list[str] = field(default_factory=list)  # genome hashes
    emitter: str = ""  # which emitter of the search proposed it (evo.search.emitters); "" before emitters
    run_id: str = ""
    worker: str = ""
    started_at: float = field(default_factory=time.time)
    finished_at: float = field(default_factory=time.time)
    id: int | None = None  # row id, set by the store

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; expected one of {STATUSES}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; expected one of {OBJECTIVES}")

    def _clock(self, objective: str) -> tuple[float | None, float | None]:
        """(kernel, baseline) times on `objective`'s clock."""
        return (self.call_ms, self.baseline_call_ms) if objective == "call" else (self.median_ms, self.baseline_ms)

    @property
    def fitness_ms(self) -> float | None:
        """The time this row is judged by: call_ms under the "call" objective, else median_ms. Never the other
        clock as a stand-in: a row without its objective's clock has no fitness, so clocks never mix."""
        return self._clock(self.objective)[0]

    @property
    def baseline_fitness_ms(self) -> float | None:
        """The baseline's time on the same clock as `fitness_ms`."""
        return self._clock(self.objective)[1]

    @property
    def ratio(self) -> float | None:
        """Speed relative to the primary baseline measured in the same process, on the objective's clock: > 1 is
        faster."""
        mine, base = self.fitness_ms, self.baseline_fitness_ms
        if self.status != "ok" or not mine or not base:
            return None
        return base / mine

    def judged_by(self, objective: str) -> Evaluation:
        """This row judged by `objective`. A row holding that objective's clock takes it (a GPU row holds both, so
        it serves either objective), as does a failure (it has no fitness on any clock). A correct row without
        that clock keeps its own objective rather than borrow the other clock: only a stand-in worker's rows (tests)
        lack one, since a GPU row's versions name the timing protocol that records both."""
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; expected one of {OBJECTIVES}")
        if objective == self.objective or (self.status == "ok" and self._clock(objective)[0] is None):
            return self
        return replace(self, objective=objective)

    @property
    def versions_key(self) -> str:
        return json.dumps(self.versions, sort_keys=True)

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for k in ("versions", "times_ms", "resources", "parents"):
            row[k] = json.dumps(row[k], sort_keys=True)
        row.pop("id")
        return row

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Evaluation:
        row = dict(row)
        for k in ("versions", "times_ms", "resources", "parents"):
            row[k] = json.loads(row[k]) if row.get(k) else ({} if k in ("versions", "resources") else [])
        row.pop("versions_key", None)
        if not row.get("objective"):  # a row of an older store: judged by GPU time then
            row.pop("objective", None)
        return cls(**row)
