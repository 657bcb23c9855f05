"""The plain-torch self-check `evo export` appends to an exported decode GEMM (see `Operator.selfcheck_source` for the
names it must define), as a real module: the operator writes the problem's constants and pastes the text below the
marker verbatim. The constants here only make the file importable on its own (tests)."""

import torch

SELFCHECK_SIZES = (1, 64, 64)  # (M, N, K)
SELFCHECK_DTYPE = torch.float32
SELFCHECK_PARTS = ()  # of "rmsnorm", "swiglu", "geglu", "bias", "residual"
SELFCHECK_EPS = 1e-6
SELFCHECK_TOLERANCE = 3e-3

# ---- evo pastes this file from here on into every module it renders for this family ----


def selfcheck_inputs(device):
    """Fresh random inputs (never zeros): x standard normal, W with variance 1/K (as nn.Linear's), then the norm
    weight, the bias and the residual where the variant takes them."""
    m, n, k = SELFCHECK_SIZES
    gen = torch.Generator(device=device).manual_seed(20240917)
    gated = "swiglu" in SELFCHECK_PARTS or "geglu" in SELFCHECK_PARTS
    shapes = [(m, k), (2 * n if gated else n, k)]
    shapes += [(k,)] * ("rmsnorm" in SELFCHECK_PARTS) + [(n,)] * ("bias" in SELFCHECK_PARTS)
    shapes += [(m, n)] * ("residual" in SELFCHECK_PARTS)
    out = [torch.randn(s, generator=gen, device=device, dtype=torch.float32) for s in shapes]
    out[1] = out[1] * k ** -0.5
    return tuple(t.to(SELFCHECK_DTYPE) for t in out)


def _selfcheck_linear(x, w, rest, exact, eps):
    """The variant's math: exact in fp32 (the reference), or as PyTorch eager computes it (the baseline)."""
    rest = list(rest)
    norm_weight = rest.pop(0) if "rmsnorm" in SELFCHECK_PARTS else None
    bias = rest.pop(0) if "bias" in SELFCHECK_PARTS else None
    residual = rest.pop(0) if "residual" in SELFCHECK_PARTS else None
    if exact:
        x, w = x.float(), w.float()
        norm_weight, bias, residual = (None if t is None else t.float() for t in (norm_weight, bias, residual))
    if norm_weight is not None:
        xf = x.float()
        x = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * norm_weight.float()).to(x.dtype)
    y = torch.nn.functional.linear(x, w, bias)  # cuBLAS on nn.Linear's layout, as nn.Linear calls it
    if "swiglu" in SELFCHECK_PARTS:
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.silu(gate) * up
    if "geglu" in SELFCHECK_PARTS:  # GELU's tanh approximation as the gate (gelu_pytorch_tanh)
        gate, up = y.chunk(2, dim=-1)
        y = torch.nn.functional.gelu(gate, approximate="tanh") * up
    return y + residual if residual is not None else y


def selfcheck_reference(x, w, *rest):
    return _selfcheck_linear(x, w, rest, True, SELFCHECK_EPS)


def selfcheck_baseline(x, w, *rest, eps=SELFCHECK_EPS):  # eps: as the entry takes it (a zoo's fallback)
    return _selfcheck_linear(x, w, rest, False, eps)


def problem_sizes(x, w, *rest):
    rows = w.shape[0] // 2 if "swiglu" in SELFCHECK_PARTS or "geglu" in SELFCHECK_PARTS else w.shape[0]
    return (x.numel() // x.shape[-1], rows, x.shape[-1])
