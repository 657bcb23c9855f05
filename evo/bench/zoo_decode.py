"""The layer bench's decode loop (`python -m evo.bench.zoo_layer ... --decode-steps N`): N steps of one new token each
after the layer's context, through a fixed-capacity KV cache whose length is a device tensor (evo.zoo.decode), four
ways (eager, compile, zoo_eager, zoo_compile), each on two clocks:

- per call: the N steps called back to back from Python (ms per step, the fastest of `rounds` passes);
- graph: ONE step captured in a CUDA graph and replayed N times: the replay advances the length itself, so the same
  graph serves every step of the growing sequence, as a serving engine's decode graph does (ms per step).

Every pass starts from the same state (the layer's seeded context, length = context) and feeds the same token x each
step; each way's last step's output is checked against the plain eager loop's, and the length against context + N.
A MoE layer's last token is not compared where its routing is a near tie (evo.bench.zoo_tolerance; `routing_near_tie`).
Attention is torch's SDPA over the masked cache in every way (evo.zoo.decode says why); the zoo ways patch the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from evo.bench.zoo_tolerance import TOLERANCE, near_ties, with_router_logits
from evo.experiment.oneline import one_line
from evo.zoo.goals import WAYS

__all__ = ["measure_decode", "decode_markdown"]

NEEDS_CUDA = "needs CUDA"
GOAL = 1.20  # issue 40: the zoo's best way under graphs over torch's best way under graphs, 128 steps from 4k
NOTE = ("attention: torch SDPA over the fixed-capacity cache masked by the length tensor in every way (evo's attention "
        "kernel takes its key length from the shapes, not from a tensor); the zoo ways run its patched roles, "
        "rope_cache with the length tensor as its start")


def _reason(e: BaseException) -> str:
    return one_line(f"{type(e).__name__}: {e}")[:300]


def _step_fns(plain: Any, patched: Any, cuda: bool, compile_mode: str) -> dict[str, Callable[..., Any] | None]:
    """Way -> step(x, cache, length) (None: the way needs CUDA)."""
    import torch

    from evo.zoo.decode import decode_step

    def step_of(layer: Any) -> Callable[..., Any]:
        return lambda x, cache, length: decode_step(layer, x, cache, length, check=False)

    def compiled(layer: Any) -> Callable[..., Any] | None:
        return torch.compile(step_of(layer), mode=compile_mode, dynamic=False, fullgraph=True) if cuda else None

    if cuda:
        torch._dynamo.reset()
    return {"eager": step_of(plain), "compile": compiled(plain), "zoo_eager": step_of(patched),
            "zoo_compile": compiled(patched)}


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def _per_call(step: Callable[..., Any], x: Any, state: Any, layer: Any, steps: int, rounds: int, cuda: bool
              ) -> tuple[float, Any]:
    """(ms per step, fastest of `rounds` passes of `steps` steps; the last step's output of the last pass)."""
    best, out = float("inf"), None
    for _ in range(rounds):
        state.reset(layer)
        _sync(cuda)
        t0 = time.perf_counter()
        for _ in range(steps):
            out = step(x, state.cache, state.length)
        _sync(cuda)
        best = min(best, (time.perf_counter() - t0) * 1e3 / steps)
    return best, out


def _graph(step: Callable[..., Any], x: Any, state: Any, layer: Any, steps: int) -> tuple[float, Any]:
    """(ms per step of N replays of one captured step, the last replay's output)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up before capture, as torch.cuda.graph asks
        for _ in range(2):
            step(x, state.cache, state.length)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step(x, state.cache, state.length)
    state.reset(layer)  # (capture runs nothing; the warm-up moved the length)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(steps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / steps, out


def _last_step_tied(plain: Any, step: Callable[..., Any], x: Any, state: Any, steps: int, margin: float
                    ) -> bool | None:
    """Whether the plain eager loop's last step routes its token on a near tie (evo.bench.zoo_tolerance: either
    expert is correct), from that step's router logits in an untimed pass; None for a layer without routing."""
    if not hasattr(plain, "keep_router_logits"):
        return None
    state.reset(plain)
    for _ in range(steps - 1):
        step(x, state.cache, state.length)
    _, logits = with_router_logits(plain, lambda: step(x, state.cache, state.length))
    return bool(near_ties(logits, plain.spec.experts_per_token, margin)[-1])


def measure_decode(plain: Any, patched: Any, steps: int, dtype: str, device: str, tolerance: float, seed: int = 0,
                   rounds: int = 3, compile_mode: str = "max-autotune-no-cudagraphs") -> dict[str, Any]:
    """The decode loop's entry of zoo.json: per way the ms per step on both clocks, errors of the last step's output
    against the plain eager loop's, failures (way -> one line)."""
    import torch

    from evo.evaluate.check import relative_error
    from evo.problem import DTYPES
    from evo.zoo.decode import DecodeState, check_decode

    cuda = device == "cuda"
    gen = torch.Generator().manual_seed(seed + 1_000_003)
    x = torch.randn(1, plain.spec.hidden_size, generator=gen).to(getattr(torch, DTYPES[dtype])).to(device)
    capacity = plain.context + steps + 2  # (+2: the graph's warm-up steps run past the N timed ones)
    row: dict[str, Any] = {"steps": steps, "context": plain.context, "capacity": capacity, "tokens": 1, "note": NOTE}
    failures: dict[str, str] = {}
    errors: dict[str, float] = {}
    ref = None
    with torch.no_grad():
        for way, step in _step_fns(plain, patched, cuda, compile_mode).items():
            layer = patched if way.startswith("zoo") else plain
            row[f"{way}_ms"] = row[f"{way}_graph_ms"] = None
            if step is None:
                failures[way] = failures[f"{way}_graph"] = NEEDS_CUDA
                continue
            state = DecodeState.for_layer(layer, capacity)
            check_decode(layer, x, state.cache, state.length)
            try:
                step(x, state.cache, state.length)  # a compiled way compiles here
                row[f"{way}_ms"], out = _per_call(step, x, state, layer, steps, rounds, cuda)
                if int(state.length) != plain.context + steps:
                    raise RuntimeError(f"the length is {int(state.length)} after {steps} steps from "
                                       f"{plain.context}")
            except Exception as e:  # a way that fails is recorded and the others still run
                _sync(cuda)
                failures[way] = _reason(e)
                continue
            if way == "eager":
                ref = out
                tied = _last_step_tied(plain, step, x, state, steps, TOLERANCE[dtype])
                if tied is not None:
                    row["routing_near_tie"] = tied
            elif ref is not None:
                errors[way] = relative_error(out, ref)
            if not cuda:
                failures[f"{way}_graph"] = NEEDS_CUDA
                continue
            try:
                state.reset(layer)
                row[f"{way}_graph_ms"], out = _graph(step, x, state, layer, steps)
                if ref is not None:
                    errors[f"{way}_graph"] = relative_error(out, ref)
            except Exception as e:
                _sync(cuda)
                failures[f"{way}_graph"] = _reason(e)
    row["errors"] = errors
    row["max_rel_error"] = max(errors.values()) if errors else None
    row["tolerance"] = tolerance
    # a near tie: the last token may go to either expert, so its output is not compared (the errors are kept)
    row["within_tolerance"] = (row["max_rel_error"] is None or row["max_rel_error"] <= tolerance
                               or bool(row.get("routing_near_tie")))
    row["failures"] = failures
    torch_best = min((row[f"{w}_graph_ms"] for w in ("eager", "compile") if row[f"{w}_graph_ms"]), default=None)
    zoo_best = min((row[f"{w}_graph_ms"] for w in ("zoo_eager", "zoo_compile") if row[f"{w}_graph_ms"]), default=None)
    row["zoo_vs_torch_graphs"] = torch_best / zoo_best if torch_best and zoo_best else None
    return row


def decode_markdown(decode: dict[str, Any] | None) -> list[str]:
    """zoo.md's section on the decode loop."""
    if not decode:
        return []
    head = "| clock | " + " | ".join(WAYS) + " |"
    lines = ["", f"## Decode loop: {decode['steps']} steps of one token after {decode['context']} cached", "",
             "Milliseconds per step; `graph`: one step captured in a CUDA graph, replayed for every step (the length "
             f"is a device tensor). {decode['note']}.", "", head, "|" + " --- |" * (len(WAYS) + 1)]
    for clock, suffix in (("per call", "_ms"), ("graph", "_graph_ms")):
        cells = ["-" if decode.get(f"{w}{suffix}") is None else f"{decode[f'{w}{suffix}']:.4g}" for w in WAYS]
        lines.append(f"| {clock} | " + " | ".join(cells) + " |")
    ratio = decode.get("zoo_vs_torch_graphs")
    err = decode.get("max_rel_error")
    versus = "-" if ratio is None else f"{ratio:.2f}x (goal {GOAL:.2f}x: {'met' if ratio >= GOAL else 'not met'})"
    tie = " (not compared: its token is a routing near tie, either expert correct)" \
        if decode.get("routing_near_tie") else ""
    lines += ["", f"Zoo's best way under graphs / torch's best way under graphs: {versus}; last step's error "
                  f"{'-' if err is None else f'{err:.2g}'} / {decode['tolerance']:g}"
                  f"{'' if decode['within_tolerance'] else ' WRONG'}{tie}."]
    lines += [f"- {way}: {why}" for way, why in decode.get("failures", {}).items()]
    return lines
