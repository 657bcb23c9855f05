"""What the MoE expert GEMMs are measured against, and their exact reference: one description (`MoEMath`) gives the
fp32 reference, the loop over experts a user writes (transformers 5's MixtralExperts.forward, split at the
activation), torch.compile of that loop, and torch's grouped GEMM (`torch._grouped_mm`) over the tokens sorted by
expert, eager and under torch.compile's max-autotune. A contender that cannot run here raises
`ContenderUnavailable` with why (the bench records it as skipped)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evo.problem import Problem
from operators.base import Baseline

__all__ = ["MoEMath", "ContenderUnavailable", "moe_baselines", "moe_contenders"]


class ContenderUnavailable(RuntimeError):
    """A contender that cannot run in this environment; the message says why."""


@dataclass(frozen=True)
class MoEMath:
    gate_up: bool  # inputs (x[T, K], gate_up_proj[E, 2N, K], topk_ids[T, k]) -> h[T, k, N]; else the down projection
    # (h[T, k, K], down_proj[E, N, K], topk_ids[T, k], topk_weights[T, k]) -> y[T, N]

    @property
    def text(self) -> str:
        if self.gate_up:
            return "h[t, j] = silu(x[t] @ Wg[e]^T) * (x[t] @ Wu[e]^T), e = topk_ids[t, j]"
        return "y[t] = sum_j topk_weights[t, j] * (h[t, j] @ W[e]^T), e = topk_ids[t, j]"

    def reference(self, *inputs: Any) -> Any:
        """The exact result in fp32; a slot whose id is outside [0, E) contributes zeros."""
        import torch

        a, w, ids = inputs[0].float(), inputs[1].float(), inputs[2]
        tokens, top_k = ids.shape
        experts = w.shape[0]
        if self.gate_up:
            n = w.shape[1] // 2
            out = torch.zeros(tokens, top_k, n, dtype=torch.float32, device=a.device)
        else:
            a = a.reshape(tokens, top_k, -1)
            out = torch.zeros(tokens, top_k, w.shape[1], dtype=torch.float32, device=a.device)
        if a.device.type == "meta":  # shapes only: the gather by expert is data-dependent (no meta form)
            return out if self.gate_up else out.sum(dim=1)
        for e in range(experts):
            tok, pos = torch.where(ids == e)
            if self.gate_up:
                gate, up = (a[tok] @ w[e].t()).chunk(2, dim=-1)
                out[tok, pos] = torch.nn.functional.silu(gate) * up
            else:
                out[tok, pos] = (a[tok, pos] @ w[e].t()) * inputs[3].float()[tok, pos, None]
        return out if self.gate_up else out.sum(dim=1)

    def eager(self) -> Any:
        """The loop over the experts hit that transformers' MixtralExperts runs, in the inputs' dtype: a one-hot
        mask, the experts with tokens (a host sync), per expert the gathered rows through F.linear, then SwiGLU
        (gate_up) or the routing weight and index_add_ into the token rows (down)."""
        import torch

        functional = torch.nn.functional

        def moe_expert_loop(*inputs: Any) -> Any:
            a, w, ids = inputs[:3]
            tokens, top_k = ids.shape
            experts = w.shape[0]
            mask = functional.one_hot(ids, num_classes=experts + 1).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
            if self.gate_up:
                out = a.new_zeros(tokens, top_k, w.shape[1] // 2)
            else:
                a = a.reshape(tokens, top_k, -1)
                out = a.new_zeros(tokens, w.shape[1])
            for expert in hit:
                e = expert[0]
                if e == experts:
                    continue
                pos, tok = torch.where(mask[e])
                if self.gate_up:
                    gate, up = functional.linear(a[tok], w[e]).chunk(2, dim=-1)
                    out[tok, pos] = functional.silu(gate) * up
                else:
                    rows = functional.linear(a[tok, pos], w[e]) * inputs[3][tok, pos, None]
                    out.index_add_(0, tok, rows.to(out.dtype))
            return out

        return moe_expert_loop

    def grouped(self) -> Any:
        """torch._grouped_mm over the slots sorted by expert (offs: each expert's end in that order), the weights
        read transposed in place; the rows scattered back to slot order, and summed per token for the down
        projection."""
        import torch

        functional = torch.nn.functional

        def moe_grouped_mm(*inputs: Any) -> Any:
            a, w, ids = inputs[:3]
            tokens, top_k = ids.shape
            experts = w.shape[0]
            sorted_ids, order = torch.sort(ids.reshape(-1), stable=True)
            ends = torch.searchsorted(sorted_ids, torch.arange(1, experts + 1, device=ids.device,
                                                               dtype=sorted_ids.dtype)).to(torch.int32)
            rows = a[order // top_k] if self.gate_up else a.reshape(tokens * top_k, -1)[order]
            out = torch._grouped_mm(rows, w.transpose(1, 2), offs=ends)
            if self.gate_up:
                gate, up = out.chunk(2, dim=-1)
                out = functional.silu(gate) * up
            else:
                out = out * inputs[3].reshape(-1)[order, None]
            slots = torch.empty_like(out)
            slots[order] = out
            return slots.view(tokens, top_k, -1) if self.gate_up else slots.view(tokens, top_k, -1).sum(dim=1)

        return moe_grouped_mm


def moe_baselines(math: MoEMath) -> list[Baseline]:
    """The primary baseline: the loop over experts a transformers user runs."""
    return [Baseline("eager", lambda problem: math.eager(),
                     "PyTorch eager: transformers' loop over the experts hit (one-hot mask, per expert F.linear on "
                     "the gathered rows" + (", SwiGLU)" if math.gate_up else ", routing weight, index_add_)"))]


def moe_contenders(math: MoEMath) -> list[Baseline]:
    """torch.compile of the loop, and torch's grouped GEMM, eager and compiled, where this torch and GPU run it."""
    return [
        Baseline("torch_compile", lambda problem: _compiled(math),
                 "torch.compile (default mode) of the eager loop: its data-dependent expert set breaks the graph"),
        Baseline("grouped_mm", lambda problem: _grouped(math, problem),
                 "torch._grouped_mm over the slots sorted by expert (cuBLAS/CUTLASS grouped GEMM), the activation "
                 "and the routing as torch ops"),
        Baseline("grouped_mm_compile", lambda problem: _grouped_compiled(math, problem),
                 "torch.compile (max-autotune-no-cudagraphs) of the grouped-GEMM way: Inductor's grouped-mm Triton "
                 "templates with the activation and the routing fused around them (what a compiled transformers "
                 "model with grouped_mm experts runs)"),
    ]


def _compiled(math: MoEMath) -> Any:
    import torch

    torch._dynamo.reset()  # a fresh cache per problem
    return torch.compile(math.eager())


def _grouped(math: MoEMath, problem: Problem) -> Any:
    """The grouped-GEMM function, after one tiny call in the problem's dtype on the GPU: ContenderUnavailable with
    torch's own reason where it cannot run (no torch._grouped_mm; on CUDA, a dtype other than bf16 or an older GPU)."""
    import torch

    if not hasattr(torch, "_grouped_mm"):
        raise ContenderUnavailable(f"torch {torch.__version__} has no torch._grouped_mm")
    from evo.problem import DTYPES

    dtype = getattr(torch, DTYPES[problem.dtype])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch._grouped_mm(torch.zeros(16, 16, dtype=dtype, device=device),
                          torch.zeros(2, 16, 16, dtype=dtype, device=device),
                          offs=torch.tensor([8, 16], dtype=torch.int32, device=device))
    except (RuntimeError, NotImplementedError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ContenderUnavailable(f"torch._grouped_mm cannot run {problem.dtype} on {device} here: {first}") from None
    return math.grouped()


def _grouped_compiled(math: MoEMath, problem: Problem) -> Any:
    """The grouped-GEMM way under torch.compile's max-autotune (its first call autotunes); unavailable where the
    grouped GEMM itself cannot run."""
    import torch

    fn = _grouped(math, problem)
    torch._dynamo.reset()  # a fresh cache per problem
    return torch.compile(fn, mode="max-autotune-no-cudagraphs")
