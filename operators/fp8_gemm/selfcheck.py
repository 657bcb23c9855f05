"""The plain-torch self-check `evo export` appends to an exported FP8 GEMM (see `Operator.selfcheck_source` for the
names it must define), as a real module: the operator writes the problem's constants and pastes the text below the
marker verbatim. The constants here only make the file importable on its own (tests)."""

import torch

SELFCHECK_SIZES = (16, 256, 256)  # (M, N, K)
SELFCHECK_DTYPE = torch.bfloat16
SELFCHECK_SCALES = "tensor"  # or "channel", "block"
SELFCHECK_TOLERANCE = 1e-2

# ---- evo pastes this file from here on into every module it renders for this family ----


def _selfcheck_expanded(scale, grouping, rows, k):
    """Scales broadcast against [rows, k]: one, one per row, or per 1x128 group / 128x128 block repeated."""
    if grouping == "tensor" or scale.numel() == 1:
        return scale.reshape(())
    if grouping == "row":
        return scale.reshape(rows, 1)
    if grouping == "group":
        return scale.reshape(rows, k // 128).repeat_interleave(128, dim=1)
    return scale.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)


def _selfcheck_groupings():
    return {"tensor": ("tensor", "tensor"), "channel": ("row", "row"), "block": ("group", "block")}[SELFCHECK_SCALES]


def _selfcheck_quantize(x, grouping):
    """x as float8_e4m3fn and its float32 scales, amax / 448 over each group."""
    rows, k = x.shape
    if grouping == "tensor":
        amax = x.abs().amax().reshape(1)
    elif grouping == "row":
        amax = x.abs().amax(dim=1)
    elif grouping == "group":
        amax = x.reshape(rows, k // 128, 128).abs().amax(dim=-1)
    else:
        blocks = -(-rows // 128)
        padded = torch.nn.functional.pad(x, (0, 0, 0, blocks * 128 - rows))
        amax = padded.reshape(blocks, 128, k // 128, 128).abs().amax(dim=(1, 3))
    scale = amax.clamp(min=1e-12) / 448.0
    q = (x / _selfcheck_expanded(scale, grouping, rows, k)).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, scale.float().contiguous()


def selfcheck_inputs(device):
    """Fresh random inputs (never zeros): a standard normal and W with variance 1/K, quantized to e4m3 with the
    problem's scales."""
    m, n, k = SELFCHECK_SIZES
    gen = torch.Generator(device=device).manual_seed(20240917)
    a = torch.randn(m, k, generator=gen, device=device, dtype=torch.float32)
    w = torch.randn(n, k, generator=gen, device=device, dtype=torch.float32) * k ** -0.5
    grouping_a, grouping_w = _selfcheck_groupings()
    a_q, a_scale = _selfcheck_quantize(a, grouping_a)
    w_q, w_scale = _selfcheck_quantize(w, grouping_w)
    return a_q, w_q, a_scale, w_scale


def _selfcheck_dequant_matmul(a, w, a_scale, w_scale, dtype):
    grouping_a, grouping_w = _selfcheck_groupings()
    a2 = a.reshape(-1, a.shape[-1])
    a_d = a2.to(dtype) * _selfcheck_expanded(a_scale, grouping_a, *a2.shape).to(dtype)
    w_d = w.to(dtype) * _selfcheck_expanded(w_scale, grouping_w, *w.shape).to(dtype)
    return torch.matmul(a_d, w_d.t()).reshape(*a.shape[:-1], w.shape[0])


def selfcheck_reference(a, w, a_scale, w_scale):
    return _selfcheck_dequant_matmul(a, w, a_scale, w_scale, torch.float64).float()


def selfcheck_baseline(a, w, a_scale, w_scale):
    """The eager dequantize-then-matmul in the output dtype."""
    return _selfcheck_dequant_matmul(a, w, a_scale, w_scale, SELFCHECK_DTYPE)


def problem_sizes(a, w, *scales):
    return (a.numel() // a.shape[-1], w.shape[0], a.shape[-1])


def problem_dtype(a, w, *scales, out=None, out_dtype=None):
    """The problem's dtype is the output's (the operands are e4m3): out_dtype, else out's, else the rendered one."""
    if out_dtype is not None:
        return out_dtype
    return SELFCHECK_DTYPE if out is None else out.dtype
