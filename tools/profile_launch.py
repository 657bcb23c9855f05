"""Where a call's host time goes: the layers of an evo entry function, peeled one at a time, on the GPU's host.

    python tools/profile_launch.py      # prints a table; $EVO_OUT/launch-profile.json when EVO_OUT is set

Per kernel: the torch function users would call instead; the entry function as users call it (allocating its
result); with `out=` (no allocation); the plan's run() (no signature key, no look-up); the bound kernel's
__call__ (no plan); the compiled kernel's C launcher called directly (the floor); and, for scale, torch.empty
and the signature key alone. Host microseconds per call from evo.evaluate.clocks.host_us (bursts of calls).
"""

from __future__ import annotations

import json
import os

import torch

import operators
from evo.evaluate.clocks import host_us
from evo.evaluate.modules import load_source
from evo.problem import HOPPER


def _layers(module, entry: str, inputs: tuple, out) -> dict[str, object]:
    fn = getattr(module, entry)
    fn(*inputs)
    fn(*inputs, out=out)
    run = list(module._PLANS.values())[-1]  # the plan of calls with out=, bound by now
    kernel = run.kernel
    launch, head = kernel._raw
    sig = module.signature
    captured = {}

    def spy(*args):  # the positional arguments the plan hands the bound kernel, captured once
        captured["args"] = args
        return original(*args)

    original, kernel.__class__.__call__ = kernel.__class__.__call__, lambda self, *a: spy(self, *a)
    fn(*inputs, out=out)
    kernel.__class__.__call__ = original
    args = captured["args"][1:]
    flat = kernel._expanded(args) if kernel._encode is not None else args  # host descriptors, encoded
    g, dev = kernel.grid, kernel.device
    stream = torch._C._cuda_getCurrentRawStream
    return {
        "entry (allocating)": lambda: fn(*inputs),
        "entry with out=": lambda: fn(*inputs, out=out),
        "plan run()": lambda: run(*inputs, out) if entry == "matmul" else run(inputs[0], out),
        "BoundKernel call": lambda: kernel(*args),
        "C launcher (floor)": lambda: launch(g[0], g[1], g[2], stream(dev), *head, *flat),
        "torch.empty alone": lambda: torch.empty_like(out),
        "signature key alone": lambda: (sig(inputs[0]), sig(inputs[-1]), None),
    }


def main() -> list[dict]:
    rows = []
    gemm, softmax = operators.get("gemm"), operators.get("softmax")
    cases = [
        (gemm, (16, 4096, 4096), dict(BLOCK_M=16, BLOCK_N=64, BLOCK_K=128, num_warps=4, num_stages=4),
         lambda a, b: torch.matmul(a, b)),
        (gemm, (4096, 4096, 4096), dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3,
                                        memory="host_descriptor", persistent=True, GROUP_M=8),
         lambda a, b: torch.matmul(a, b)),
        (softmax, (8192, 5000), dict(BLOCK=8192), lambda x: torch.softmax(x, -1)),
    ]
    for op, shape, genes, rival in cases:
        problem = op.problem(shape, "bf16")
        genome = op.family.make(op.family.base(**genes))
        module = load_source(op.render(genome, problem, HOPPER))
        inputs = tuple(op.make_inputs(problem, 0))
        out = op.reference(*inputs).to(inputs[0].dtype)
        layers = {"torch (what users call instead)": lambda r=rival, i=inputs: r(*i)}
        layers.update(_layers(module, op.entry, inputs, out))
        times = host_us(list(layers.values()), reps=15)
        for name, us in zip(layers, times, strict=True):
            rows.append({"problem": problem.key, "layer": name, "host_us": round(us, 2)})
    return rows


if __name__ == "__main__":
    table = main()
    print(f"{'problem':>28} {'layer':>34} {'host us':>8}")
    for r in table:
        print(f"{r['problem']:>28} {r['layer']:>34} {r['host_us']:8.2f}")
    if os.environ.get("EVO_OUT"):
        with open(os.path.join(os.environ["EVO_OUT"], "launch-profile.json"), "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "rows": table}, f, indent=1)
