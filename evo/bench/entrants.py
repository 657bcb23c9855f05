"""What `evo bench` and `evo bench-search` measure: the problems chosen on the command line, the versions that
decide a timing, and a stored evaluation's kernel as a contender."""

from __future__ import annotations

import platform
from typing import Any

from evo.bench.measure import Entrant
from evo.bench.results import EVO_NAME
from evo.evaluate.timing import PROTOCOL as TIMING_PROTOCOL
from evo.experiment.spec import Experiment
from evo.problem import Problem, Target
from evo.store.record import Evaluation

__all__ = ["select_problems", "versions", "evo_entrant", "finalist_pool", "FINALIST_BAND"]

EVO = EVO_NAME
# elites the search timed within this fraction of the best are re-timed side by side too: search timings of
# near-equal kernels are noise apart (an H200 bench of causal head-dim-64 attention picked 0.87x where the run
# before had found a 0.91x kernel)
FINALIST_BAND = 0.05


# -- choosing what to measure -----------------------------------------------------------------------------
def select_problems(experiment: Experiment, tokens: list[str] | None) -> list[Problem]:
    """Problems named by key ('gemm:16x4096x4096:bf16'), shape ('16x4096x4096', every dtype), or 1-based
    position in the experiment ('3', '1-5'); all of them when `tokens` is empty."""
    problems = list(experiment.problems)
    if not tokens:
        return problems
    chosen: list[Problem] = []
    for raw in (t for token in tokens for t in token.split(",") if t.strip()):
        token = raw.strip()
        if token.replace("-", "").isdigit():
            lo, _, hi = token.partition("-")
            first, last = int(lo), int(hi or lo)
            if not 1 <= first <= last <= len(problems):
                raise ValueError(f"problem positions {token!r} outside 1-{len(problems)}")
            hits = problems[first - 1:last]
        else:
            hits = [p for p in problems if token in (p.key, p.shape_text)]
            if not hits:
                listing = ", ".join(p.key for p in problems)
                raise ValueError(f"no problem {token!r} in experiment {experiment.name}; problems: {listing}")
        chosen += [p for p in hits if p not in chosen]
    return chosen


def versions() -> dict[str, str]:
    """Versions that decide a timing: torch, triton, CUDA, Python, and Helion when it is importable."""
    import importlib.metadata as md

    import torch
    import triton

    from evo.surface.package_origin import evo_version

    out = {"torch": torch.__version__, "triton": triton.__version__, "cuda": str(torch.version.cuda),
           "python": platform.python_version(), "evo": evo_version(), "timing": TIMING_PROTOCOL}
    try:
        out["helion"] = md.version("helion")
    except md.PackageNotFoundError:
        pass
    return out


def finalist_pool(elites: list[Evaluation], least: int, band: float = FINALIST_BAND) -> list[Evaluation]:
    """The elites (best first) that a bench re-times side by side to pick evo's contender: the best `least`, then
    every other elite the search timed within `band` of the best, at most 3 x `least` in all; the side-by-side
    pass, not the search's timing noise, decides among kernels that close. `least` 1 asks for no such pass."""
    if least <= 1:
        return elites[:max(least, 0)]
    best = elites[0].median_ms if elites else None
    near = [e for e in elites[least:] if best and e.median_ms is not None and e.median_ms <= best * (1 + band)]
    return (elites[:least] + near)[:3 * least]


def evo_entrant(operator: Any, ev: Evaluation, problem: Problem, target: Target, name: str = EVO,
                stored: str | None = None) -> tuple[Entrant, bool]:
    """The kernel of a stored evaluation as a contender (loaded on first use), and whether its source differs from
    the one the search measured. `stored` is that source as the run's store kept it (Store.source): the contender
    runs it as it is; None renders the genome again (a store made before sources were kept), which differs when the
    renderer changed since."""
    from evo.evaluate.modules import load_source, source_hash

    try:
        genome = operator.family.from_canonical(ev.genome)
        source = stored if stored is not None else operator.render(genome, problem, target)
    except Exception as e:  # reported as the contender's reason by measure_contenders
        failure = e

        def unavailable(p: Problem) -> Any:
            raise failure

        return Entrant(name, unavailable, "evo elite (cannot be rendered again)"), False

    def make(p: Problem) -> Any:
        return getattr(load_source(source), operator.entry)

    return Entrant(name, make, f"evo elite: genome {genome.hash}, source {ev.source_hash}"), \
        source_hash(source) != ev.source_hash
