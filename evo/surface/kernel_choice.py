"""Never slower than what it replaces: whether an exported module (`evo export --all`, `evo zoo --collect`) runs evo's
elite for a problem or the baseline it was timed against (torch's own op: torch.matmul, scaled_dot_product_attention,
the operator's reference), and why.

evo's kernel is used only where its stored evaluation beat the baseline side by side: the baseline timed in the
same process, on the same inputs, on the run's objective clock (`Evaluation.ratio` > 1). Elsewhere the module calls
the baseline. A smoke run timed nothing: its kernels are used (that is what a smoke run tries) and no win is claimed.
An operator that supplies no baseline code keeps evo's kernel, and the reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["KernelChoice", "choose", "export_choices", "BASELINE_SOURCE"]

EVO, BASELINE = "evo", "baseline"


@dataclass(frozen=True)
class KernelChoice:
    use: str  # "evo" or "baseline"
    why: str  # one phrase, e.g. "1.12x cublas on the gpu clock"
    ratio: float | None  # evo's elite against the baseline on the objective's clock (None: not timed)


def choose(evaluation: Any, smoke: bool, has_baseline: bool = True) -> KernelChoice:
    """The choice for one problem from its elite's stored `evaluation` (an evo.store.record.Evaluation)."""
    base = evaluation.baseline or "the baseline"
    if smoke:
        return KernelChoice(EVO, "smoke run, nothing timed: no win claimed (evo's kernel runs, untimed)", None)
    ratio = evaluation.ratio
    clock = f"on the {evaluation.objective} clock"
    if ratio is not None and ratio > 1.0:
        return KernelChoice(EVO, f"{ratio:.3f}x {base} {clock}", ratio)
    if not has_baseline:
        measured = f"{ratio:.3f}x {base} {clock}" if ratio is not None else "not timed against a baseline"
        return KernelChoice(EVO, f"{measured}; the operator supplies no baseline code to fall back to", ratio)
    if ratio is None:
        return KernelChoice(BASELINE, f"evo's kernel was not timed against {base}: {base} runs", None)
    return KernelChoice(BASELINE, f"evo's best {ratio:.3f}x {base} {clock}: {base} runs", ratio)


def export_choices(found: list[Any], smoke: bool) -> dict[str, KernelChoice]:
    """Problem key -> what an `export_all` module runs for each elite in `found` (evo.archive.elite.BestKernel): evo's
    elite or its baseline, the operator's self-check baseline (an operator with none keeps evo's kernel)."""
    import operators

    out = {}
    for e in found:
        source = operators.get(e.problem.operator).selfcheck_source(e.problem) or ""
        out[e.problem.key] = choose(e.evaluation, smoke, "def selfcheck_baseline(" in source)
    return out


# The generated module's baseline call (evo.surface.export's dispatcher): the elite module's `selfcheck_baseline`,
# called as the entry is, with the entry's options (eps=, scale=) and `out=` filled when given.
BASELINE_SOURCE = '''

def _evo_baseline(module):
    """The baseline the elite was timed against, called as the entry is (`out=` filled when given)."""
    base = module.selfcheck_baseline

    def baseline(*inputs, out=None, **options):
        result = base(*inputs, **options)
        if out is None:
            return result
        for into, value in zip(out, result) if isinstance(out, tuple) else ((out, result),):
            into.copy_(value)  # an entry returning several tensors takes a tuple as out=
        return out

    baseline.__name__ = baseline.__qualname__ = f"baseline_{_EVO_ENTRY}"
    return baseline
'''
