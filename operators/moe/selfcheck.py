"""The plain-torch self-check `evo export` appends to an exported MoE expert GEMM (see `Operator.selfcheck_source` for
the names it must define), as a real module: the operator writes the problem's constants and pastes the text below
the marker verbatim. The constants here only make the file importable on its own (tests)."""

import torch

SELFCHECK_SIZES = (5, 4, 2, 40, 64)  # (T, E, TOPK, N, K)
SELFCHECK_DTYPE = torch.float32
SELFCHECK_GATE_UP = True  # moe_gate_up; False: moe_down
SELFCHECK_TOLERANCE = 3e-3

# ---- evo pastes this file from here on into every module it renders for this family ----


def selfcheck_inputs(device):
    """Fresh random inputs (never zeros): the activations standard normal, each expert's weight with variance 1/K (as
    nn.Linear's), the routing as Mixtral's router makes it from standard-normal logits (top-k of the softmax,
    renormalised)."""
    t, e, k, n, kk = SELFCHECK_SIZES
    gen = torch.Generator(device=device).manual_seed(20240917)
    a_shape = (t, kk) if SELFCHECK_GATE_UP else (t, k, kk)
    a = torch.randn(a_shape, generator=gen, device=device).to(SELFCHECK_DTYPE)
    rows = 2 * n if SELFCHECK_GATE_UP else n
    w = (torch.randn(e, rows, kk, generator=gen, device=device) * kk ** -0.5).to(SELFCHECK_DTYPE)
    values, ids = torch.topk(torch.softmax(torch.randn(t, e, generator=gen, device=device), dim=-1), k, dim=-1)
    if SELFCHECK_GATE_UP:
        return a, w, ids
    return a, w, ids, (values / values.sum(dim=-1, keepdim=True)).to(SELFCHECK_DTYPE)


def _selfcheck_moe(inputs, exact):
    """The loop over the experts hit (transformers' MixtralExperts): exact in fp32 (the reference) or in the inputs'
    dtype (the baseline)."""
    a, w, ids = inputs[:3]
    weights = inputs[3] if len(inputs) > 3 else None
    if exact:
        a, w = a.float(), w.float()
        weights = None if weights is None else weights.float()
    tokens, k = ids.shape
    if SELFCHECK_GATE_UP:
        out = a.new_zeros(tokens, k, w.shape[1] // 2)
    else:
        a = a.reshape(tokens, k, -1)
        out = a.new_zeros(tokens, w.shape[1])
    for e in range(w.shape[0]):
        tok, pos = torch.where(ids == e)
        if SELFCHECK_GATE_UP:
            gate, up = torch.nn.functional.linear(a[tok], w[e]).chunk(2, dim=-1)
            out[tok, pos] = torch.nn.functional.silu(gate) * up
        else:
            rows = torch.nn.functional.linear(a[tok, pos], w[e]) * weights[tok, pos, None]
            out.index_add_(0, tok, rows.to(out.dtype))
    return out


def selfcheck_reference(*inputs):
    return _selfcheck_moe(inputs, True)


def selfcheck_baseline(*inputs):
    return _selfcheck_moe(inputs, False)


def problem_sizes(*inputs):
    a, w, ids = inputs[:3]
    n = w.shape[1] // 2 if SELFCHECK_GATE_UP else w.shape[1]
    return (ids.shape[0], w.shape[0], ids.shape[1], n, a.shape[-1])
