"""The plain-torch self-check `evo export` appends to an exported GEMM, with or without a fused epilogue (see
`Operator.selfcheck_source` for the names it must define), as a real module: the operator writes the problem's
constants and pastes the text below the marker verbatim. The steps are those of operators/gemm/epilogue.py's
`Epilogue.reference` (the exact fp32 result) and `Epilogue.eager` (what the kernel was timed against), with the same
torch calls (tests/operators/gemm/test_epilogue_selfcheck.py checks that they agree for every part). The constants
here only make the file importable on its own (tests)."""

import torch

SELFCHECK_SIZES = (8, 8, 8)  # (M, N, K), N the output's width
SELFCHECK_DTYPE = torch.float32
SELFCHECK_PARTS = ()  # the epilogue's parts, of "scale", "bias", an activation, "swiglu" or "geglu", "residual"
SELFCHECK_TOLERANCE = 2e-3  # largest accepted ||C - ref|| / ||ref||

# ---- evo pastes this file from here on into every module it renders for this family ----


def _selfcheck_operands():
    """The entry's arguments after A and B, in order."""
    return tuple(p for p in ("bias", "residual", "scale") if p in SELFCHECK_PARTS)


def selfcheck_inputs(device):
    """Fresh standard-normal A[M, K], B[K, N] (B[K, 2N] for a gate: the gate's columns, then the up projection's),
    then bias[N] and residual[M, N] where the epilogue takes them, and a scale in [0.25, 2) (never zeros: some GPUs
    run faster on zeros)."""
    m, n, k = SELFCHECK_SIZES
    gen = torch.Generator(device=device).manual_seed(20240917)
    shapes = {"a": (m, k), "b": (k, 2 * n if _selfcheck_gated() else n), "bias": (n,), "residual": (m, n)}
    names = ["a", "b", *(p for p in _selfcheck_operands() if p != "scale")]
    out = [torch.randn(shapes[p], generator=gen, device=device, dtype=torch.float32).to(SELFCHECK_DTYPE)
           for p in names]
    if "scale" in SELFCHECK_PARTS:
        out.append(0.25 + 1.75 * float(torch.rand((), generator=gen, device=device)))
    return tuple(out)


def _selfcheck_activation(y):
    if "gelu" in SELFCHECK_PARTS:
        return torch.nn.functional.gelu(y)
    if "gelu_tanh" in SELFCHECK_PARTS:
        return torch.nn.functional.gelu(y, approximate="tanh")
    if "silu" in SELFCHECK_PARTS:
        return torch.nn.functional.silu(y)
    if "relu" in SELFCHECK_PARTS:
        return torch.nn.functional.relu(y)
    return y


def _selfcheck_gated():
    """B holds the gate's N columns, then the up projection's (SwiGLU, GeGLU)."""
    return "swiglu" in SELFCHECK_PARTS or "geglu" in SELFCHECK_PARTS


def _selfcheck_gate(y):
    if not _selfcheck_gated():
        return y
    gate, up = y.chunk(2, dim=-1)
    if "geglu" in SELFCHECK_PARTS:
        return torch.nn.functional.gelu(gate, approximate="tanh") * up
    return torch.nn.functional.silu(gate) * up


def selfcheck_reference(a, b, *operands):
    """The exact result in fp32: products of the same (rounded) inputs, then the epilogue's steps in order."""
    args = dict(zip(_selfcheck_operands(), operands, strict=True))
    y = _selfcheck_gate(torch.matmul(a.float(), b.float()))
    if "scale" in args:
        y = y * args["scale"]
    if "bias" in args:
        y = y + args["bias"].float()
    y = _selfcheck_activation(y)
    return y + args["residual"].float() if "residual" in args else y


def selfcheck_baseline(a, b, *operands):
    """What the kernel was timed against, in the inputs' dtype: cuBLAS on CUDA (addmm for a bias, as nn.Linear),
    then one torch op per part."""
    args = dict(zip(_selfcheck_operands(), operands, strict=True))
    alpha = args.get("scale", 1.0)
    if "bias" in args:
        y = torch.addmm(args["bias"], a, b, alpha=alpha)
    else:
        y = torch.matmul(a, b)
        if "scale" in args:
            y = y * alpha
    y = _selfcheck_activation(_selfcheck_gate(y))
    return args["residual"] + y if "residual" in args else y


def problem_sizes(a, b, *operands):
    """(M, N, K), N the output's width (B holds 2N columns for a gate)."""
    return (a.shape[0], b.shape[1] // 2 if _selfcheck_gated() else b.shape[1], a.shape[1])
