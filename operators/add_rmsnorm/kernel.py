"""Residual add and RMSNorm in one kernel: h = x + residual, y = h * rsqrt(mean(h^2) + eps) * weight, over contiguous
rows; both h (the new residual stream) and y (the normed input of the next layer part) are written.

The kernel and its launch plan, as one real module: evo renders a module for a genome by writing a header (the
genome's constants and the entry function) and pasting this file below the marker verbatim, so the code a search
measured and a user exports is this file. h is rounded to the input dtype before the norm, as PyTorch's
`x + residual` followed by an RMSNorm computes it.

Structure switches (constexpr): SINGLE keeps ROWS whole rows in registers (each element read once); otherwise the
row is walked in BLOCK-wide steps twice, the second pass reading back the h this program wrote (after a barrier,
from L2). Cache hints: EVICT_IN on the reads of x and the residual, EVICT_W on the weight, STORE_CACHE and
STORE_EVICT on both outputs ("" is Triton's default).
"""

import torch
import triton
import triton.language as tl

from evo.launch.runtime import BoundKernel

# ---- evo pastes this file from here on into every module it renders for this family ----


@triton.jit
def add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, n_rows, eps,
                       N_COLS: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr, SINGLE: tl.constexpr,
                       NUM_STAGES: tl.constexpr, EVICT_IN: tl.constexpr, EVICT_W: tl.constexpr,
                       STORE_CACHE: tl.constexpr, STORE_EVICT: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    row_start = rows.to(tl.int64)[:, None] * N_COLS  # 64-bit: rows * N_COLS may exceed 2**31
    if SINGLE:
        cols = tl.arange(0, BLOCK)
        col_ok = cols < N_COLS
        mask = row_ok[:, None] & col_ok[None, :]
        offs = row_start + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT_IN)
        r = tl.load(r_ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT_IN)
        h = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + offs, h, mask=mask, cache_modifier=STORE_CACHE, eviction_policy=STORE_EVICT)
        hf = h.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(hf * hf, axis=1) / N_COLS + eps)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy=EVICT_W).to(tl.float32)
        y = hf * rstd[:, None] * w[None, :]
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=STORE_CACHE,
                 eviction_policy=STORE_EVICT)
    else:
        squares = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        for start in tl.range(0, N_COLS, BLOCK, num_stages=NUM_STAGES):
            cols = start + tl.arange(0, BLOCK)
            mask = row_ok[:, None] & (cols < N_COLS)[None, :]
            offs = row_start + cols[None, :]
            x = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT_IN)
            r = tl.load(r_ptr + offs, mask=mask, other=0.0, eviction_policy=EVICT_IN)
            h = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + offs, h, mask=mask)  # read back below: no hint that would push it out of L2
            hf = h.to(tl.float32)
            squares += hf * hf
        rstd = tl.rsqrt(tl.sum(squares, axis=1) / N_COLS + eps)
        # every thread's h stores before any thread's reads; .cg reads L2, never a stale L1 line
        tl.debug_barrier()
        for start in tl.range(0, N_COLS, BLOCK, num_stages=NUM_STAGES):
            cols = start + tl.arange(0, BLOCK)
            col_ok = cols < N_COLS
            mask = row_ok[:, None] & col_ok[None, :]
            offs = row_start + cols[None, :]
            hf = tl.load(h_ptr + offs, mask=mask, other=0.0, cache_modifier=".cg").to(tl.float32)
            w = tl.load(w_ptr + cols, mask=col_ok, other=0.0, eviction_policy=EVICT_W).to(tl.float32)
            y = hf * rstd[:, None] * w[None, :]
            tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=STORE_CACHE,
                     eviction_policy=STORE_EVICT)


def _described(t):
    if isinstance(t, torch.Tensor):
        return f"a {t.dtype} tensor of shape {tuple(t.shape)} on {t.device}"
    return repr(t)[:60]


def add_rmsnorm_plan(x, residual, weight, out, config):
    """Check the arguments (ValueError naming what is wrong) and fix what depends only on their signature: sizes,
    grid and the bound kernel. Returns run(x, residual, weight, out, eps) for every call of this signature, which
    returns (y, h). `config` holds the genome's constants (the rendered module's CONFIG)."""
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(f"x must be a tensor with rows of at least one element; got {_described(x)}")
    n_cols = x.shape[-1]
    for name, t in (("residual", residual),):
        if not isinstance(t, torch.Tensor) or t.shape != x.shape or t.dtype != x.dtype or t.device != x.device:
            raise ValueError(f"{name} must have x's shape {tuple(x.shape)}, dtype and device; got {_described(t)}")
    if not isinstance(weight, torch.Tensor) or weight.shape != (n_cols,) or weight.device != x.device:
        raise ValueError(f"weight must have shape ({n_cols},) on {x.device}; got {_described(weight)}")
    if out is not None:
        ok = isinstance(out, (tuple, list)) and len(out) == 2 and all(
            isinstance(t, torch.Tensor) and t.shape == x.shape and t.dtype == x.dtype and t.device == x.device
            and t.is_contiguous() for t in out)
        if not ok:
            raise ValueError("out must be a pair (y, h) of contiguous tensors of x's shape, dtype and device")
    n_rows = x.numel() // n_cols
    single = config["SINGLE"]
    # a single pass holds the whole row: a row wider than the tuned block gets a wider block
    block = config["BLOCK"] if not single or n_cols <= config["BLOCK"] else triton.next_power_of_2(n_cols)
    grid = (triton.cdiv(n_rows, config["ROWS"]),)
    kernel = BoundKernel(add_rmsnorm_kernel, grid, {"num_warps": config["NUM_WARPS"],
                                                    "num_stages": config["NUM_STAGES"]})
    consts = (n_cols, config["ROWS"], block, single, config["NUM_STAGES"], config["EVICT_IN"], config["EVICT_W"],
              config["STORE_CACHE"], config["STORE_EVICT"])
    contiguous = x.is_contiguous() and residual.is_contiguous() and weight.is_contiguous()

    def run(x, residual, weight, out, eps):
        if not contiguous:  # each call copies into contiguous rows first
            x, residual, weight = x.contiguous(), residual.contiguous(), weight.contiguous()
        y, h = (torch.empty_like(x), torch.empty_like(x)) if out is None else out
        if n_rows:
            kernel(x, residual, weight, y, h, n_rows, eps, *consts)
        return y, h

    run.kernel = kernel  # for inspection
    return run
