"""`cache_attention`: a decode step's attention over a KV cache, the keys each query sees given by a boolean mask,
as transformers runs it with a static cache (every decode step over the whole fixed-size cache, a mask hiding the
slots not written yet):

  o[b, t, h] = softmax_{l: mask[b, 0, t, l]}(q[b, h, t] . k[b, h // G, l] * scale) @ v[b, h // G, l]

The entry is `cache_attention(q, k, v, mask, scale=None, out=None)`: q [B, H, Tq, D], k and v [B, Hkv, L, D] (read in
place, any strides), mask bool [B, 1, Tq, L]; returns o [B, Tq, H, D] contiguous. A query row with no key allowed gets
zeros. Problems are sized (batch, heads, kv_heads, q_len, kv_len, head_dim), as `attention`'s; the inputs' mask lets
each query see the keys up to its own position in a cache filled to three quarters (the rest empty slots), so the
search meets what a decode step meets. Throughput is GB/s: the kernel streams the cache.

`cache_attention+softcap<cap>` caps the scores before the mask, cap * tanh(scores / cap), as Gemma 2 does
(attn_logit_softcapping 50: `cache_attention+softcap50`; the cap spelled as attention's, operators/attention/names.py);
its window, on the sliding layers, is in the mask transformers passes. SDPA cannot cap: its contenders are the
family's eager path (transformers' Gemma-2 eager attention with the mask made additive), torch.compile of it and
FlexAttention (the cap a score_mod, the mask a block mask).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from evo.launch import runtime_source
from evo.problem import DTYPES, Problem, Target
from genomes.base import Genome, GenomeFamily
from genomes.cache_attention import CacheAttentionFamily
from genomes.rowwise import ELEM_BYTES
from operators._paste import pasted_source
from operators.attention.names import cap_text
from operators.base import Baseline, Operator

__all__ = ["CacheAttentionOperator", "KERNEL_FILE", "SELFCHECK_FILE", "FILLED", "reference", "eager", "sdpa_gqa",
           "cache_attention_variant"]

KERNEL_FILE = Path(__file__).with_name("kernel.py")
SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")
FILLED = 0.75  # of the cache written before the step's queries, in the inputs a problem is measured on
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}
MAX_CAP = 1e6  # the largest logit cap a name takes, as attention's

_HEADER = '''"""{title}
"""

import torch
import triton
import triton.language as tl

{runtime}

# the genome's constants, as operators/cache_attention/kernel.py's plan reads them
CONFIG = {config}

_PLANS = PlanCache()  # argument signature -> run(...): checks, grid, workspace and the bound kernel, done once


def cache_attention(q, k, v, mask, scale=None, out=None):
    """Attention of q [B, H, Tq, D] over the KV cache k, v [B, Hkv, L, D] where the bool mask [B, 1, Tq, L] is True;
    returns o [B, Tq, H, D] in q's dtype."""
    key = (signature(q), signature(k), signature(v), signature(mask), None if out is None else signature(out))
    run = _PLANS.get(key)
    if run is None:
        run = _PLANS.add(key, cache_attention_plan(q, k, v, mask, out, CONFIG))
    return run(q, k, v, mask, out, scale)


'''


def reference(*inputs: Any, softcap: float = 0.0) -> Any:
    """The exact result in fp32, [B, Tq, H, D], the logits capped at `softcap` (0: not) (selfcheck.py, imported on
    use: it imports torch)."""
    from operators.cache_attention.selfcheck import selfcheck_reference

    return selfcheck_reference(*inputs, softcap=softcap)


def eager(*inputs: Any, softcap: float = 0.0) -> Any:
    """transformers' SDPA path with a mask, or with a cap its eager path (selfcheck.py's baseline)."""
    from operators.cache_attention.selfcheck import selfcheck_baseline

    return selfcheck_baseline(*inputs, softcap=softcap)


def sdpa_gqa(q: Any, k: Any, v: Any, mask: Any, scale: float | None = None) -> Any:
    """SDPA told the heads are grouped (enable_gqa: K and V not repeated), with the mask."""
    import torch

    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                                         enable_gqa=q.shape[1] != k.shape[1])
    return o.transpose(1, 2).contiguous()


def _eager_of(softcap: float) -> Any:
    def attention(*inputs: Any) -> Any:
        return eager(*inputs, softcap=softcap)

    return attention


def _compiled(softcap: float) -> Any:
    def make(problem: Problem) -> Any:
        import torch

        torch._dynamo.reset()  # a fresh cache per problem: every shape compiled statically
        return torch.compile(_eager_of(softcap), mode="max-autotune-no-cudagraphs", dynamic=False, fullgraph=True)

    return make


def _flex(softcap: float) -> Any:
    """torch.compile of FlexAttention: the cap as a score_mod, the call's bool mask as a block mask, made again only
    when the mask changes (transformers makes one per forward pass and every layer shares it)."""

    def make(problem: Problem) -> Any:
        import torch

        try:
            from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        except ImportError as e:
            raise RuntimeError(f"torch {torch.__version__} has no FlexAttention ({e})") from None
        gqa = problem.dims["heads"] != problem.dims["kv_heads"]
        fn = torch.compile(flex_attention, dynamic=False)
        made: dict[Any, Any] = {}

        def score_mod(score: Any, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return softcap * torch.tanh(score / softcap)

        def block_mask(mask: Any) -> Any:
            key = (mask.data_ptr(), mask._version, tuple(mask.shape), mask.device)
            if key not in made:
                made.clear()
                made[key] = create_block_mask(lambda b, h, q_idx, kv_idx: mask[b, 0, q_idx, kv_idx], mask.shape[0],
                                              None, mask.shape[2], mask.shape[3], device=mask.device)
            return made[key]

        def call(q: Any, k: Any, v: Any, mask: Any, scale: float | None = None) -> Any:
            o = fn(q, k, v, score_mod=score_mod, block_mask=block_mask(mask), scale=scale, enable_gqa=gqa)
            return o.transpose(1, 2).contiguous()

        return call

    return make


class CacheAttentionOperator(Operator):
    name = "cache_attention"
    dims = ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim")
    example = (1, 32, 8, 1, 4096, 128)
    dtypes = ("fp16", "bf16")
    entry = "cache_attention"
    throughput_unit = "GB/s"
    torch_schema = "(Tensor q, Tensor k, Tensor v, Tensor mask, float? scale=None) -> Tensor"

    def __init__(self, overrides: dict[str, list[Any]] | None = None, softcap: float = 0.0) -> None:
        if isinstance(softcap, bool) or not 0 <= softcap <= MAX_CAP:
            raise ValueError(f"cache_attention: the logit cap must be 0 (none) or in (0, {MAX_CAP:g}]; got {softcap!r}")
        self.softcap = float(softcap)
        self.name = "cache_attention" + (f"+softcap{cap_text(self.softcap)}" if self.softcap else "")
        super().__init__(overrides)

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return CacheAttentionFamily(overrides)

    def problem(self, sizes: tuple[int, ...] | list[int], dtype: str) -> Problem:
        p = super().problem(sizes, dtype)
        d = p.dims
        if d["kv_heads"] < 1 or d["heads"] % d["kv_heads"]:
            raise ValueError(f"{self.name}: heads={d['heads']} must be a multiple of kv_heads={d['kv_heads']}")
        if d["q_len"] > d["kv_len"]:
            raise ValueError(f"{self.name}: q_len={d['q_len']} exceeds the cache's kv_len={d['kv_len']}")
        return p

    # -- code generation --------------------------------------------------------------------------------
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        self.family.require(genome, problem, target, self.name)
        g = genome.as_dict()
        config = {"BLOCK_N": g["BLOCK_N"], "SPLITS": g["SPLITS"], "SKIP_MASKED": g["skip_masked"],
                  "NUM_WARPS": g["num_warps"], "NUM_STAGES": g["num_stages"], "SOFTCAP": self.softcap}
        what = f", logits capped at {self.softcap:g}" if self.softcap else ""
        title = (f"evo kernel: {self.name} (attention over a KV cache with a mask{what}) rendered from genome "
                 f"{genome.hash} "
                 f"for {problem.key} on sm_{target.arch}.\n\n" + textwrap.fill(f"Genome: {genome}", 100))
        config_text = "{\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in config.items()) + "}"
        return _HEADER.format(title=title, runtime=runtime_source().rstrip("\n"), config=config_text) \
            + pasted_source(KERNEL_FILE)

    # -- as a torch op ----------------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        q = args[0]
        return q.new_empty((q.shape[0], q.shape[2], q.shape[1], q.shape[3]))

    def call_into(self, entry: Any, *args: Any, out: Any) -> Any:
        return entry(*args, out=out)

    # -- judging a kernel -------------------------------------------------------------------------------
    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """q, k, v standard normal; the mask lets query t see keys 0 .. filled + t, filled = FILLED of the cache (at
        least up to the queries): a decode step's view of a static cache (operators/cache_attention/selfcheck.py)."""
        import torch

        d = problem.dims
        dtype = getattr(torch, DTYPES[problem.dtype])
        sizes = tuple(d[n] for n in self.dims)
        if torch.device(device).type == "meta":
            shapes = self.tensor_shapes(problem)
            return (*(torch.empty(s, device=device, dtype=dtype) for s in shapes[:3]),
                    torch.empty(shapes[3], device=device, dtype=torch.bool))
        from operators.cache_attention.selfcheck import cache_inputs

        return cache_inputs(sizes, dtype, FILLED, device, seed)

    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        b, h, hk, tq, length, dim = (d[n] for n in self.dims)
        return [(b, h, tq, dim), (b, hk, length, dim), (b, hk, length, dim), (b, 1, tq, length), (b, tq, h, dim)]

    def reference(self, *inputs: Any) -> Any:
        return reference(*inputs, softcap=self.softcap)

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        if self.softcap:
            return [Baseline("eager", lambda problem: _eager_of(self.softcap),
                             f"transformers' Gemma-2 eager attention with a mask (logits capped at {self.softcap:g}): "
                             "K and V repeated per query head, matmul, tanh cap, additive mask, fp32 softmax")]
        return [Baseline("eager", lambda problem: eager,
                         "transformers' SDPA path with a mask: K and V repeated per query head, then SDPA")]

    def bench_baselines(self) -> list[Baseline]:
        if self.softcap:  # SDPA cannot cap
            flex = Baseline("flex_attention", _flex(self.softcap), f"torch.compile of FlexAttention (logits capped at "
                            f"{self.softcap:g}: a score_mod; the mask a block mask, made once per mask)")
            return [*self.baselines(), *self.tuner_baselines(), flex]
        gqa = Baseline("sdpa_gqa", lambda problem: sdpa_gqa, "SDPA with enable_gqa and the mask")
        return [*self.baselines(), gqa, *self.tuner_baselines()]

    def tuner_baselines(self, effort: str = "full", budget_s: int | None = None) -> list[Baseline]:
        path = "its Gemma-2 eager path" if self.softcap else "transformers' SDPA path"
        return [Baseline("torch_compile", _compiled(self.softcap),
                         f"torch.compile(mode='max-autotune-no-cudagraphs') of {path}")]

    def selfcheck_source(self, problem: Problem) -> str:
        """The problem's constants above operators/cache_attention/selfcheck.py pasted verbatim."""
        d = problem.dims
        head = ["import torch", "", f"SELFCHECK_SIZES = {tuple(d[n] for n in self.dims)!r}  # {', '.join(self.dims)}",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_FILLED = {FILLED!r}",
                f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}", f"SELFCHECK_SOFTCAP = {self.softcap!r}", "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)

    def flops(self, problem: Problem) -> int:
        d = problem.dims
        return 4 * d["batch"] * d["heads"] * d["q_len"] * d["kv_len"] * d["head_dim"]

    def bytes(self, problem: Problem) -> int:
        """K and V of the whole cache (what the baselines read; the kernel skips empty blocks), q, the mask, o."""
        d = problem.dims
        e = ELEM_BYTES[problem.dtype]
        cache = 2 * d["batch"] * d["kv_heads"] * d["kv_len"] * d["head_dim"] * e
        return cache + 2 * d["batch"] * d["heads"] * d["q_len"] * d["head_dim"] * e \
            + d["batch"] * d["q_len"] * d["kv_len"]


def cache_attention_variant(options: tuple[str, ...], overrides: dict[str, list[Any]] | None = None
                            ) -> CacheAttentionOperator:
    """`cache_attention+softcap<cap>` (the evo.operator_variants entry point of "cache_attention"), the cap spelled
    as attention's: cache_attention+softcap50; ValueError naming a bad option."""
    given = "+".join(("cache_attention", *options))
    if len(options) != 1 or not options[0].startswith("softcap"):
        raise ValueError(f"cache_attention takes one option, softcap<cap> (cache_attention+softcap50: Gemma 2's "
                         f"attn_logit_softcapping); got {given!r}")
    text = options[0].removeprefix("softcap")
    try:
        cap = float(text)
    except ValueError:
        cap = None
    if cap is None or not 0 < cap <= MAX_CAP:
        raise ValueError(f"{given}: softcap takes a positive number up to 1e6 in its name, e.g. softcap50")
    if cap_text(cap) != text:
        raise ValueError(f"{given}: write the cap cache_attention+softcap{cap_text(cap)}")
    return CacheAttentionOperator(overrides, softcap=cap)
