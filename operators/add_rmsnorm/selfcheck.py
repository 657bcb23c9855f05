"""The plain-torch self-check `evo export` appends to an exported `rmsnorm+residual` kernel (see
`Operator.selfcheck_source` for the names it must define), as a real module: the operator writes the problem's
constants and pastes the text below the marker verbatim. The entry returns two tensors, (y, h), and so do the
reference and the baseline. The constants here only make the file importable on its own (tests)."""

import torch

SELFCHECK_SIZES = (4, 64)  # (rows, cols)
SELFCHECK_DTYPE = torch.float32
SELFCHECK_EPS = 1e-6
SELFCHECK_TOLERANCE = 1e-5

# ---- evo pastes this file from here on into every module it renders for this family ----


def selfcheck_inputs(device):
    """Fresh standard-normal x, residual and norm weight (never zeros), seeded."""
    rows, cols = SELFCHECK_SIZES
    gen = torch.Generator(device=device).manual_seed(20240611)
    shapes = ((rows, cols), (rows, cols), (cols,))
    return tuple(torch.randn(s, generator=gen, device=device, dtype=torch.float32).to(SELFCHECK_DTYPE)
                 for s in shapes)


def selfcheck_reference(x, residual, weight):
    """(y, h) in fp32 from the exact sum."""
    h = x.float() + residual.float()
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + SELFCHECK_EPS) * weight.float(), h


def selfcheck_baseline(x, residual, weight, eps=SELFCHECK_EPS):  # eps: as the entry takes it (a zoo's fallback)
    """What PyTorch eager runs: the add in the dtype, then torch's RMSNorm (the fp32 formula where torch lacks it)."""
    h = x + residual
    if hasattr(torch.nn.functional, "rms_norm"):
        return torch.nn.functional.rms_norm(h, (h.shape[-1],), weight, eps), h
    hf = h.float()
    return (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(h.dtype), h


def problem_sizes(x, residual, weight):
    return (x.numel() // x.shape[-1], x.shape[-1])
