"""`cache_attention` on a GPU: a decode step's attention over a static KV cache (operators/cache_attention/).

Until now the kernel was checked on a GPU only by the zoo search's own check and by generate()'s logits. Here:
- each problem's seeds (and `--random` seeded random genomes) are rendered for this GPU, checked with the search's
  own check (poisoned output, inputs untouched) in bf16, and timed beside transformers' SDPA path (K and V repeated
  per query head) in the same process, as tests/gpu/test_decode_ops_gpu.py does for the decode GEMMs;
- a genome that splits the keys over many programs (its last program combines the partial results) is captured in
  a CUDA graph and replayed while the mask grows by one key a step, as a decode loop under graphs runs it: every
  replay must match the reference, and a replay on unchanged inputs must repeat its output bit for bit.

Problems: Llama-3-8B's and Llama-3.2-1B's attention at 1, 4 and 16 new tokens over a 4096-slot cache, a batch of 4,
and a cache length that is no power of two.

    python tests/gpu/test_cache_attention_gpu.py [--random 8] [--budget-s 300]
    python -m pytest tests/gpu/test_cache_attention_gpu.py -m gpu -s
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

try:
    import pytest

    pytestmark = pytest.mark.gpu
except ImportError:  # the GPU machine may run this file as a plain script without pytest
    pytest = None

# (batch, heads, kv_heads, q_len, kv_len, head_dim)
PROBLEMS = [(1, 32, 8, t, 4096, 128) for t in (1, 4, 16)] + [(1, 32, 8, 1, 4096, 64), (4, 32, 8, 1, 4096, 128),
                                                             (1, 32, 8, 2, 2176, 128)]
QUICK = [(1, 32, 8, 1, 4096, 128), (1, 32, 8, 16, 4096, 128), (1, 32, 8, 2, 2176, 128)]


def graph_replay_check(steps: int = 4) -> str:
    """A split-key genome in a CUDA graph, replayed as the cache fills: '' when every replay is right and repeatable."""
    import torch

    import operators
    from evo.evaluate.modules import load_source
    from evo.problem import Target

    op = operators.get("cache_attention")
    problem = op.problem((1, 32, 8, 1, 4096, 128), "bf16")
    genome = op.family.make(op.family.base(BLOCK_N=64, SPLITS=32, skip_masked=True))
    launch = getattr(load_source(op.render(genome, problem, Target.from_torch())), op.entry)
    q, k, v, mask = op.make_inputs(problem, 3, device="cuda")
    out = launch(q, k, v, mask)  # plans, compiles and allocates the workspace before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(q, k, v, mask, out=out)
    failures = []
    filled = int(mask[0, 0, 0].sum())
    for step in range(steps):
        q.copy_(torch.randn_like(q))
        mask[..., filled + step] = True  # the step's new key, as a static cache's mask grows
        graph.replay()
        torch.cuda.synchronize()
        first = out.clone()
        graph.replay()
        torch.cuda.synchronize()
        want = op.reference(q, k, v, mask)
        err = float((first.float() - want.float()).norm() / want.float().norm())
        if not err <= op.tolerance(problem):
            failures.append(f"replay {step}: relative error {err:.3g}")
        if not torch.equal(first, out):
            failures.append(f"replay {step}: a second replay on the same inputs gave other bits")
    return "; ".join(failures)


def run_all(n_random: int = 0, budget_s: float = 300.0, problems: list[tuple[int, ...]] | None = None
            ) -> dict[str, Any]:
    import torch
    import triton

    from evo.problem import Target
    from tests.gpu.test_decode_ops_gpu import copy_gbs, run_problem

    started = time.monotonic()
    target = Target.from_torch()
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__, "copy_gbs": copy_gbs(), "problems": []}
    for sizes in problems or PROBLEMS:
        result["problems"].append(run_problem("cache_attention", sizes, target, n_random, started + budget_s))
        torch.cuda.empty_cache()
    result["graph_replay"] = graph_replay_check()
    return result


def report(result: dict[str, Any]) -> str:
    from tests.gpu import write_json
    from tests.gpu.test_decode_ops_gpu import summary_table

    path = write_json("cache_attention_gpu.json", result)
    table = summary_table(result).replace("CUDA graph replay of split-K linear", "CUDA graph replay, split keys")
    return table + f"\n(GB/s: K and V of the whole cache, what the baseline reads; JSON: {path})"


def test_cache_attention_is_correct_timed_and_replays_in_a_graph():
    result = run_all(n_random=4, budget_s=240, problems=QUICK)
    print("\n" + report(result))
    rows = [r for info in result["problems"] for r in info["rows"] if r["status"] != "not_run"]
    assert rows and all(r["status"] == "correct" for r in rows), \
        "\n".join(f"{r['label']} {r['status']}: {r.get('reason') or r.get('error')} | {r['genome']}" for r in rows
                  if r["status"] != "correct")
    assert not result["graph_replay"], result["graph_replay"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=0, help="random genomes per problem besides the seeds")
    parser.add_argument("--budget-s", type=float, default=300.0, help="stop starting kernels after this many seconds")
    args = parser.parse_args(argv)
    result = run_all(args.random, args.budget_s)
    print(report(result))
    rows = [r for info in result["problems"] for r in info["rows"]]
    return int(any(r["status"] in ("wrong", "crashed") for r in rows) or bool(result["graph_replay"]))


if __name__ == "__main__":
    if __package__ in (None, ""):  # run as a file: make the repository importable
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main())
