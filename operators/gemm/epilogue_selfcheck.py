"""The plain-torch self-check code `evo export` appends to an exported GEMM-with-epilogue kernel (see
`Operator.selfcheck_source` for the names it must define).

The code is written from the `Epilogue`'s fields, step by step in the order of `Epilogue.reference` (the exact
fp32 result) and `Epilogue.eager` (the baseline the kernel was timed against: addmm for a bias, then one torch
op per part), with the same torch calls; `TORCH_ACTIVATIONS` is the one table of activation -> torch text, and
tests/operators/gemm/test_epilogue_selfcheck.py checks that the generated functions equal those methods for
every part, so the two cannot drift apart. The exported module stands alone: the code imports torch only.
"""

from __future__ import annotations

from evo.problem import DTYPES, Problem
from operators.gemm.epilogue import Epilogue

__all__ = ["epilogue_selfcheck_source", "TORCH_ACTIVATIONS"]

SEED = 20240917  # the plain GEMM's self-check seed (operators/gemm/selfcheck.py)

# activation -> torch expression of the tensor `{y}` (the calls of operators/gemm/epilogue.py's _torch_activation)
TORCH_ACTIVATIONS = {
    "gelu": "torch.nn.functional.gelu({y})",
    "gelu_tanh": "torch.nn.functional.gelu({y}, approximate='tanh')",
    "silu": "torch.nn.functional.silu({y})",
    "relu": "torch.nn.functional.relu({y})",
}


def _inputs(problem: Problem, ep: Epilogue) -> list[str]:
    """selfcheck_inputs: the tensors of `make_inputs`, in its order, then the scale (drawn as it draws it)."""
    d = problem.dims
    b_cols = 2 * d["N"] if ep.swiglu else d["N"]
    shapes = {"a": (d["M"], d["K"]), "b": (d["K"], b_cols), "bias": (d["N"],), "residual": (d["M"], d["N"])}
    names = ["a", "b", *(n for n in ep.operands if n != "scale")]
    what = [f"A[{d['M']}, {d['K']}]", f"B[{d['K']}, {b_cols}]" + (" (gate columns, then up's)" if ep.swiglu else "")]
    what += [f"bias[{d['N']}]"] if ep.bias else []
    what += [f"residual[{d['M']}, {d['N']}]"] if ep.residual else []
    lines = ["def selfcheck_inputs(device):",
             f'    """Fresh standard-normal {", ".join(what)}' + ("; then the scale, in [0.25, 2)" if ep.scale else ""),
             '    (never zeros: some GPUs run faster on zeros)."""',
             f"    gen = torch.Generator(device=device).manual_seed({SEED})"]
    lines += [f"    {n} = torch.randn({shapes[n]!r}, generator=gen, device=device, dtype=torch.float32)"
              f".to(torch.{DTYPES[problem.dtype]})" for n in names]
    if ep.scale:
        lines.append("    scale = 0.25 + 1.75 * float(torch.rand((), generator=gen, device=device))")
    return lines + [f"    return {', '.join(_args(ep))}"]


def _args(ep: Epilogue) -> list[str]:
    return ["a", "b", *ep.operands]


def _swiglu() -> list[str]:
    return ["    gate, up = y.chunk(2, dim=-1)", "    y = torch.nn.functional.silu(gate) * up"]


def _activation(ep: Epilogue) -> list[str]:
    return [f"    y = {TORCH_ACTIVATIONS[ep.activation].format(y='y')}"] if ep.activation else []


def _reference(ep: Epilogue) -> list[str]:
    """selfcheck_reference: Epilogue.reference's steps, in its order."""
    lines = [f"def selfcheck_reference({', '.join(_args(ep))}):",
             f'    """The exact result of {ep.name} in fp32: products of the same (rounded) inputs."""',
             "    y = torch.matmul(a.float(), b.float())"]
    lines += _swiglu() if ep.swiglu else []
    lines += ["    y = y * scale"] if ep.scale else []
    lines += ["    y = y + bias.float()"] if ep.bias else []
    lines += _activation(ep)
    lines += ["    y = y + residual.float()"] if ep.residual else []
    return lines + ["    return y"]


def _baseline(ep: Epilogue) -> list[str]:
    """selfcheck_baseline: Epilogue.eager's steps, in its order (in the inputs' dtype)."""
    lines = [f"def selfcheck_baseline({', '.join(_args(ep))}):",
             '    """What the kernel was timed against (in the inputs\' dtype):', f'    {_baseline_text(ep)}."""']
    if ep.bias:
        lines.append(f"    y = torch.addmm(bias, a, b, alpha={'scale' if ep.scale else '1.0'})")
    else:
        lines.append("    y = torch.matmul(a, b)")
        lines += ["    y = y * scale"] if ep.scale else []
    lines += _swiglu() if ep.swiglu else []
    lines += _activation(ep)
    lines += ["    y = residual + y"] if ep.residual else []
    return lines + ["    return y"]


def _baseline_text(ep: Epilogue) -> str:
    return f"cuBLAS{' (addmm, as nn.Linear)' if ep.bias else ''} on CUDA, then {ep.text} as torch ops"


def epilogue_selfcheck_source(problem: Problem, epilogue: Epilogue, tolerance: float) -> str:
    """The self-check code of `problem` for a GEMM with `epilogue`: selfcheck_inputs, selfcheck_reference,
    selfcheck_baseline, SELFCHECK_TOLERANCE (`tolerance`) and problem_sizes (M, N, K), N the output's width."""
    if not epilogue.parts:
        raise ValueError("an epilogue self-check needs an epilogue (plain GEMM: operators/gemm/selfcheck.py)")
    args = ", ".join(_args(epilogue))
    n = "b.shape[1] // 2" if epilogue.swiglu else "b.shape[1]"
    blocks = [
        ["import torch"],
        _inputs(problem, epilogue),
        _reference(epilogue),
        _baseline(epilogue),
        [f"SELFCHECK_TOLERANCE = {float(tolerance)!r}  # largest accepted ||C - ref|| / ||ref||"],
        [f"def problem_sizes({args}):",
         f'    """(M, N, K), N the output\'s width{" (B holds 2N columns)" if epilogue.swiglu else ""}."""',
         f"    return (a.shape[0], {n}, a.shape[1])"],
    ]
    return "\n\n\n".join("\n".join(block) for block in blocks) + "\n"
