"""The argument checks every rendered attention module runs once per argument signature, before it plans a launch:
q[B, Hq, Lq, D] and k, v[B, Hkv, Lk, D] of one dtype and device, Hq a multiple of Hkv, and `out` of q's shape. A bad
argument is a ValueError naming it in one line.

Pasted verbatim below the header of both renderings (operators/attention/kernel.py's Triton plan and
gluon_kernel.py's Gluon plan call `check_arguments`).
"""

import torch

# ---- evo pastes this file from here on into every module it renders for this family ----


def described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def check_arguments(q, k, v, out, causal):
    """ValueError naming what is wrong with the arguments; else (b, hq, hkv, n_q, n_k, d)."""
    for name, t in (('q', q), ('k', k), ('v', v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or t.numel() == 0:
            raise ValueError(f"{name} must be a non-empty 4-d tensor [batch, heads, length, head_dim]; "
                             f"got {described(t)}")
    if k.shape != v.shape or k.dtype != q.dtype or v.dtype != q.dtype or k.device != q.device \
            or v.device != q.device:
        raise ValueError(f"k and v must have one shape and q's dtype and device; got q {described(q)}, "
                         f"k {described(k)}, v {described(v)}")
    b, hq, n_q, d = q.shape
    hkv, n_k = k.shape[1], k.shape[2]
    if k.shape[0] != b or k.shape[3] != d or hq % hkv:
        raise ValueError(f"k, v must be [{b}, H, Lk, {d}] with H dividing {hq}; got {described(k)}")
    if causal and n_q > n_k:
        raise ValueError(f"causal attention needs no more queries than keys; got {n_q} and {n_k}")
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != q.shape
                            or out.dtype != q.dtype or out.device != q.device):
        raise ValueError(f"out must be a tensor of q's shape, dtype and device; got {described(out)}")
    return b, hq, hkv, n_q, n_k, d
