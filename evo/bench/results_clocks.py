"""The markdown table of the clocks a user sees, beside `evo bench`'s GPU-time table (evo.bench.results).

GPU time says what a kernel costs the GPU; a caller in an eager loop pays the call clock (host launch cost
included: for short kernels it decides), a CUDA-graph user the graph clock (no host cost). This table gives,
per problem, evo's time on the call and graph clocks, its ratio to the primary contender and to the fastest
other contender on that clock (which need not be the fastest on GPU time), and the host µs of one call.
Ratios are the other's time over evo's (> 1: evo is faster), as everywhere in the benchmark documents.
"""

from __future__ import annotations

from typing import Any

from evo.bench.cells import EVO_NAME, fmt, geomean, problem_label, speedup

__all__ = ["CLOCKS", "clocks_table", "best_other", "not_capturable"]

# (JSON key, label): the clocks compared in the table, in their order
CLOCKS = (("call_ms", "call"), ("graph_ms", "graph"))


def _timed(p: dict[str, Any], name: str, key: str) -> float | None:
    c = p["contenders"].get(name, {})
    return c.get(key) if c.get("status") == "ok" else None


def best_other(p: dict[str, Any], key: str) -> tuple[str, float] | None:
    """(name, time) of the fastest contender other than evo on clock `key` of one problem, None if none has it."""
    timed = [(n, _timed(p, n, key)) for n in p["contenders"] if n != EVO_NAME]
    timed = [(n, t) for n, t in timed if t]
    return min(timed, key=lambda t: t[1]) if timed else None


def not_capturable(doc: dict[str, Any]) -> list[str]:
    """'<contender> on <problem>' for each contender whose clocks were measured but not its graph clock."""
    return [f"{n} on {problem_label(p)}" for p in doc["problems"] for n, c in p["contenders"].items()
            if c.get("status") == "ok" and c.get("call_ms") is not None and c.get("graph_ms") is None]


def _ratios(p: dict[str, Any], key: str, primary: str) -> tuple[float | None, float | None, str]:
    """evo's ratio to the primary and to the best other contender on clock `key`, and the latter's name."""
    evo = _timed(p, EVO_NAME, key)
    best = best_other(p, key)
    return speedup(_timed(p, primary, key), evo), speedup(best[1] if best else None, evo), best[0] if best else ""


def clocks_table(doc: dict[str, Any]) -> str | None:
    """The clocks table of a benchmark document; None when no contender's clocks were measured or evo is absent."""
    primary = doc["primary"]
    if EVO_NAME not in (doc.get("contenders") or []) or not any(
            c.get("call_ms") is not None for p in doc["problems"] for c in p["contenders"].values()):
        return None
    head = ["problem"]
    for _, label in CLOCKS:
        head += [f"{EVO_NAME} {label} (ms)", f"{EVO_NAME} / {primary} ({label})", f"{EVO_NAME} / best other ({label})"]
    head += [f"host µs {primary}", f"host µs {EVO_NAME}"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    columns: list[list[float]] = [[] for _ in range(2 * len(CLOCKS))]
    for p in doc["problems"]:
        cells = [problem_label(p)]
        for i, (key, _) in enumerate(CLOCKS):
            vs_primary, vs_best, best = _ratios(p, key, primary)
            cells += [fmt(_timed(p, EVO_NAME, key)), f"{vs_primary:.2f}×" if vs_primary else "-",
                      f"{vs_best:.2f}× ({best})" if vs_best else "-"]
            columns[2 * i] += [vs_primary] if vs_primary else []
            columns[2 * i + 1] += [vs_best] if vs_best else []
        cells += [fmt(_timed(p, primary, "host_us")), fmt(_timed(p, EVO_NAME, "host_us"))]
        rows.append("| " + " | ".join(cells) + " |")
    n = len(doc["problems"])
    foot = [f"geomean ({n} problems)"]
    for i in range(len(CLOCKS)):
        foot.append("")  # under evo's own times: no mean
        for values in (columns[2 * i], columns[2 * i + 1]):
            g = geomean(values)
            foot.append(f"**{g:.2f}×** ({len(values)}/{n})" if g is not None else "-")
    rows.append("| " + " | ".join(foot + ["", ""]) + " |")
    return "\n".join(rows)
