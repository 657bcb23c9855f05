"""`evo export RUN --shape S --config`: the winning configuration as text, for a user's own kernel (issue 41).

An elite's genome in three parts: every gene; the part a `triton.Config` holds (the UPPER_CASE genes, which
evo's kernels take as `tl.constexpr` parameters, as kwargs; num_warps, num_stages and the like as launch
options), printed as the `triton.Config(...)` call and as a JSON dict; and the genes that choose the structure of
evo's own kernel (schedule, split, memory path), which a hand-written kernel has no field for.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["LAUNCH_OPTIONS", "config_parts", "config_text"]

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # triton.Config's own keywords


def config_parts(genes: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(constexpr kwargs, launch options, evo's structural genes) of a genome's genes."""
    kwargs = {k: v for k, v in genes.items() if k.isupper()}
    options = {k: genes[k] for k in LAUNCH_OPTIONS if k in genes}
    rest = {k: v for k, v in sorted(genes.items()) if k not in kwargs and k not in options}
    return kwargs, options, rest


def config_text(elites: list[Any], meta: dict[str, Any]) -> str:
    """The configuration of each elite (evo.surface.export.BestKernel) of a run whose store metadata is `meta`,
    under a line naming its problem and what it was measured at."""
    lines: list[str] = []
    for e in elites:
        genes = json.loads(e.evaluation.genome).get("genes", {})
        kwargs, options, rest = config_parts(genes)
        call = ", ".join([repr(kwargs)] + [f"{k}={v!r}" for k, v in options.items()])
        lines += [f"{e.problem.key}: {_measured(e, meta)}",
                  f"  genes: {' '.join(f'{k}={v}' for k, v in sorted(genes.items()))}",
                  f"  triton.Config({call})",
                  f"  as a dict: {json.dumps({'kwargs': kwargs, **options})}"]
        if rest:
            lines.append(f"  evo's kernel structure (no triton.Config field): "
                         f"{' '.join(f'{k}={v}' for k, v in rest.items())}")
    return "\n".join(lines)


def _measured(e: Any, meta: dict[str, Any]) -> str:
    import operators
    from evo.surface.export import is_smoke
    from evo.surface.smoke_label import smoke_score, smoke_value

    ev = e.evaluation
    if is_smoke(ev, meta):
        return f"smoke score {smoke_score(smoke_value(operators.get(e.problem.operator), e.problem, ev))}"
    ratio = f", {ev.ratio:.3f}x {ev.baseline} on the {ev.objective} clock" if ev.ratio else ""
    return f"{ev.median_ms:.4g} ms GPU time{ratio} on {ev.gpu or '?'}"
