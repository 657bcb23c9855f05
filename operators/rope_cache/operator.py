"""rope_cache: the step between a decoder layer's merged QKV projection and its attention, as one launch. Rotary
embedding (rotate-half convention: Llama, Qwen2, Mistral) of the new tokens' query and key heads from cos/sin tables
at positions start..start+T-1, keys and values written into a fixed-capacity KV cache at those positions IN PLACE,
queries returned in the [1, heads, T, head_dim] layout attention takes. `start` is a device tensor, so one launch
plan and one CUDA graph serve every decode step.

Problem dims: tokens, heads (query heads), kv_heads, head_dim, context (tokens already cached: the first new one's
position; the cache holds context + tokens). The check judges q and the cache's written positions against the fp32
formula (`written` names them), and requires every other element of the inputs unchanged. As a torch op the cache is
a mutated argument (`Tensor(a!) cache`), so torch.compile and CUDA graphs write it in place without copies.
"""

from __future__ import annotations

from typing import Any

from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, GenomeFamily, InvalidGenome
from genomes.rope_cache import RopeCacheFamily
from operators.base import Baseline, Operator
from operators.rope_cache import torch_code
from operators.rope_cache.module import pasted, render_module

__all__ = ["RopeCacheOperator", "TOLERANCE"]

# Relative Frobenius error accepted: one rounding of each rotated value to the dtype (values are copied exactly);
# a wrong position, head or half is of order 1.
TOLERANCE = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}
_ELEM = {"fp16": 2, "bf16": 2, "fp32": 4}


def _eager(problem: Problem) -> Any:
    return torch_code.torch_rope_cache


def _compiled(problem: Problem) -> Any:
    import torch

    from operators.rowwise import fresh_function

    return torch.compile(fresh_function(torch_code.torch_rope_cache), dynamic=False)


class RopeCacheOperator(Operator):
    name = "rope_cache"
    dims = ("tokens", "heads", "kv_heads", "head_dim", "context")
    example = (1, 32, 8, 128, 4096)
    dtypes = ("fp16", "bf16", "fp32")
    entry = "rope_cache"
    throughput_unit = "GB/s"
    torch_schema = "(Tensor qkv, Tensor cos, Tensor sin, Tensor(a!) cache, Tensor start) -> Tensor"
    mutates_args = ("cache",)

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return RopeCacheFamily(overrides)

    def problem(self, sizes: tuple[int, ...] | list[int], dtype: str) -> Problem:
        p = super().problem(sizes, dtype)
        if p.dims["head_dim"] % 2:
            raise ValueError(f"{self.name} {p.shape_text}: head_dim {p.dims['head_dim']} is odd; the rotary "
                             "embedding pairs the two halves of a head")
        return p

    # -- code generation ----------------------------------------------------------------------------
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        reasons = self.family.violations(genome, problem, target)
        if reasons:
            raise InvalidGenome(f"genome {genome} is not valid for {problem.key}: {'; '.join(reasons)}")
        return render_module(genome.as_dict(), problem, target)

    # -- judging a kernel ---------------------------------------------------------------------------
    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        t, h, k, d, c = problem.sizes
        return [(t, (h + 2 * k) * d), (c + t, d), (c + t, d), (2, 1, k, c + t, d), (1,)]

    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        import torch

        dtype = getattr(torch, DTYPES[problem.dtype])
        return torch_code.rope_inputs(*problem.sizes, dtype, seed, device)

    def reference(self, *inputs: Any) -> Any:
        """(q, the cache's written positions) in fp32: what `written` views after a call."""
        return torch_code.rope_reference(*inputs)

    def written(self, inputs: tuple[Any, ...]) -> list[Any]:
        qkv, _, _, cache, start = inputs
        return [torch_code.rope_written(cache, start, qkv.shape[0])]

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        doc = ("split, reshape and transpose to [1, heads, T, D], the tables' rows gathered at start + arange(T), "
               "rotation in fp32 cast back, index_copy_ of K and V into the cache")
        return [Baseline("torch_eager", _eager, f"the torch code a user writes: {doc}"),
                Baseline("torch_compile", _compiled, "torch.compile of that code, default mode, static shapes")]

    def flops(self, problem: Problem) -> int:
        """Two multiplies and an add per rotated element (query and key heads)."""
        t, h, k, d, _ = problem.sizes
        return 3 * t * (h + k) * d

    def bytes(self, problem: Problem) -> int:
        """qkv read once, q and the cache's keys and values written once, the tables' T rows read once (fp32)."""
        t, h, k, d, _ = problem.sizes
        return 2 * t * (h + 2 * k) * d * _ELEM[problem.dtype] + 2 * t * d * 4

    # -- kernels as torch ops -------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        import torch

        qkv, cache = args[0], args[3]
        hq, _, d = torch_code.rope_heads(qkv, cache)
        return torch.empty((1, hq, qkv.shape[0], d), dtype=qkv.dtype, device=qkv.device)

    def selfcheck_source(self, problem: Problem) -> str:
        t, h, k, d, c = problem.sizes
        return "\n".join([
            "import math",
            "",
            "import torch",
            "",
            f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}",
            "",
            "",
            pasted("torch_code.py"),
            "",
            "def selfcheck_inputs(device):",
            '    """Seeded inputs; the cache positions the kernel writes hold NaN until something writes them."""',
            f"    inputs = rope_inputs({t}, {h}, {k}, {d}, {c}, torch.{DTYPES[problem.dtype]}, 20240611, device)",
            f"    rope_written(inputs[3], inputs[4], {t}).fill_(float('nan'))",
            "    return inputs",
            "",
            "",
            "def selfcheck_reference(qkv, cos, sin, cache, start):",
            "    return rope_checked_reference(qkv, cos, sin, cache, start, SELFCHECK_TOLERANCE)",
            "",
            "",
            "def selfcheck_baseline(qkv, cos, sin, cache, start):",
            "    return torch_rope_cache(qkv, cos, sin, cache, start)",
            "",
            "",
            "def problem_sizes(qkv, cos, sin, cache, start):",
            "    hq, hkv, d = rope_heads(qkv, cache)",
            "    return (qkv.shape[0], hq, hkv, d, cache.shape[3] - qkv.shape[0])",
        ]) + "\n"
