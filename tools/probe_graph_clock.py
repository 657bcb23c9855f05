"""Why a kernel is slower replayed in a CUDA graph than called: the clocks the bench reports, taken apart.

    python tools/probe_graph_clock.py gemm+geglu:2048x14336x3584:bf16 \
        --bench reports/bench/gemm-geglu-nvidia-h200.json --rivals torch_compile

The bench's call clock is the fastest of 7 rounds of back-to-back calls (evo.evaluate.clocks.call_ms) and its
graph clock the median of 7 replays of a graph of one such round (graph_ms; until 2026-11-27 late, of 20 calls,
each contender's replays in a row). For evo's elite of KEY (from a bench file,
as tools/profile_kernel.py finds it) and the named rivals, this prints per call:
- `call min` / `call med`: the call clock's rounds, fastest and median (is the gap the clock's min against a median?);
- `graph`, `graph 20`, `graph 1`: the graph clock (a round of calls a graph), with 20 calls a graph (the clock
  before 2026-11-27 late) and with 1 (is it the graph's length?);
- `first 10` / `last 10`: 200 back-to-back calls timed one by one with events, the median of the first ten and of
  the last ten (does the kernel slow down when it runs for long: power or clock limits?);
- `kernels call` / `kernels graph`: the device time of the kernels of one call, by torch.profiler, in plain calls
  and in a graph's replay (evo.bench.zoo_profile), with the kernel names (is the kernel itself slower in a graph,
  or are there gaps?);
- `call again`: the call clock once more, last (does the order of the phases decide what a clock reads?).
`--idle-s S` rests the GPU S seconds before each phase.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _rounds(fn: Any, calls: int, rounds: int = 7) -> list[float]:
    import torch

    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t) * 1e3 / calls)
    return out


def _sustained(fn: Any, calls: int = 200) -> tuple[float, float]:
    import torch

    events = [torch.cuda.Event(enable_timing=True) for _ in range(calls + 1)]
    torch.cuda.synchronize()
    events[0].record()
    for i in range(calls):
        fn()
        events[i + 1].record()
    torch.cuda.synchronize()
    each = [events[i].elapsed_time(events[i + 1]) for i in range(calls)]
    return float(sorted(each[:10])[5]), float(sorted(each[-10:])[5])


def probe(fn: Any, names: set[str], idle_s: float = 0.0) -> dict[str, Any]:
    """The columns of the module docstring for one contender; `idle_s` seconds of an idle GPU before each phase
    (a phase's clock then starts from a rested GPU). Each phase's start is printed, for a clock log to be read
    beside (nvidia-smi's SM clock and power, as the device scripts sample them)."""
    import numpy as np

    from evo.bench.zoo_profile import profile_calls, profile_graph
    from evo.evaluate.clocks import calls_per_round, graph_ms

    def phase(name: str) -> None:
        time.sleep(idle_s)
        print(f"    phase {name} at {time.time():.3f}", flush=True)

    for _ in range(3):
        fn()
    per_call = _rounds(fn, 1, rounds=1)[0]
    phase("call")
    rounds = _rounds(fn, calls_per_round(per_call))
    row: dict[str, Any] = {"call min": min(rounds), "call med": float(np.median(rounds))}
    phase("graph")
    row["graph"] = graph_ms([fn])[0]
    row["graph 20"], row["graph 1"] = graph_ms([fn], calls=20)[0], graph_ms([fn], calls=1)[0]
    phase("sustained")
    row["first 10"], row["last 10"] = _sustained(fn)
    phase("profile")
    plain, replay = profile_calls(fn, evo_names=names), profile_graph(fn, evo_names=names)
    row["kernels call"], row["kernels graph"] = plain["kernel_us_per_call"] / 1e3, replay["kernel_us_per_call"] / 1e3
    row["names"] = [f"{k['name'][:40]} {k['us']:.1f}us x{k['count']:g}" for k in plain["kernels"]]
    phase("call again")
    row["call again"] = min(_rounds(fn, calls_per_round(per_call)))
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="probe_graph_clock.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("key", help="operator:shape:dtype")
    ap.add_argument("--bench", required=True, help="a bench JSON whose elite for KEY is evo's kernel")
    ap.add_argument("--rivals", default="", help="bench baselines beside it, comma-separated")
    ap.add_argument("--idle-s", type=float, default=0.0, help="seconds of idle GPU before each phase [0]")
    args = ap.parse_args(argv)

    import torch

    from evo.bench.zoo_profile import EVO_KERNELS
    from tools.profile_kernel import contenders

    op, problem, genome, calls, inputs = contenders(args.key, bench=args.bench, rivals=args.rivals)
    print(f"{problem.key} on {torch.cuda.get_device_name()}, evo genome {genome.canonical()}")
    cols = ("call min", "call med", "graph", "graph 20", "graph 1", "first 10", "last 10", "kernels call",
            "kernels graph", "call again")
    rows = {name: probe(lambda f=fn: f(*inputs), set(EVO_KERNELS), args.idle_s) for name, fn in calls.items()}
    print(f"{'ms per call':14s}" + "".join(f"{c:>14s}" for c in cols))
    for name, row in rows.items():
        print(f"{name:14s}" + "".join(f"{row[c]:14.4f}" if row[c] is not None else f"{'-':>14s}" for c in cols))
        print("    " + "; ".join(row["names"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
