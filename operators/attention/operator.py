"""Attention forward: O = softmax(Q K^T * scale) V per head, `attention` (every key visible) and `attention+causal`
(bottom-right causal mask), query heads sharing key/value heads (GQA, MQA), head dim of any size. A model's logit
soft-capping and sliding window are options whose value the name carries, so that a problem says what it computes:
`+softcap50` caps the logits, 50 * tanh(logits / 50) (Gemma 2's attn_logit_softcapping), and `+window4096` lets a
query see only the 4096 keys ending at its own (Gemma 2's and Mistral's sliding_window; causal only), in the order
causal, softcap, window (`attention+causal+softcap50+window4096`: Gemma 2's local layers). Their baselines are
model_baselines.py's (SDPA cannot cap); they run in the Triton kernel only (a rule keeps them off Gluon).

Problem dims: batch, heads (query heads), kv_heads, q_len, kv_len, head_dim; inputs q[B, Hq, Lq, D] and
k, v[B, Hkv, Lk, D] as `torch.nn.functional.scaled_dot_product_attention` takes them. Decode is q_len 1-16 against
a long kv_len; prefill q_len == kv_len. The reference is the formula in fp32; the baselines are SDPA as a user
calls it (the backend PyTorch picks) and, for `evo bench`, each of its backends forced in turn (flash,
memory-efficient, cuDNN): one that cannot run a problem is reported unavailable, not skipped silently. An exported
module checks itself with selfcheck.py, one real module for every variant, pasted below the problem's constants.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from evo.problem import DTYPES, Problem, Target
from genomes.attention import AttentionFamily
from genomes.base import Genome, GenomeFamily, InvalidGenome
from operators._paste import pasted_source
from operators.attention.model_baselines import model_baselines
from operators.attention.module import render_module
from operators.attention.names import cap_text, variant_name
from operators.base import Baseline, Operator

__all__ = ["AttentionOperator", "attention_variant", "TOLERANCE", "causal_pairs", "visible_pairs", "variant_name",
           "cap_text"]

# Relative Frobenius error accepted: the probabilities are rounded to the input dtype before P V (as every
# FlashAttention does), a few units of that rounding; a wrong key block or head is orders of magnitude more.
TOLERANCE = {"fp16": 4e-3, "bf16": 2.5e-2}
MAX_CAP = 1e6  # a logit cap above this caps nothing (and its name stays plain digits)
REFERENCE_SCORES = 1 << 26  # fp32 scores the reference holds at once (256 MiB)
SELFCHECK_FILE = Path(__file__).with_name("selfcheck.py")  # the exported module's self-check, pasted
_BACKENDS = (("sdpa_flash", "FLASH_ATTENTION"), ("sdpa_efficient", "EFFICIENT_ATTENTION"),
             ("sdpa_cudnn", "CUDNN_ATTENTION"))


def causal_pairs(n_q: int, n_k: int) -> int:
    """(query, key) pairs a bottom-right causal mask keeps: query i of n_q sees min(n_k, i + n_k - n_q + 1) keys."""
    return n_q * (n_k - n_q) + n_q * (n_q + 1) // 2


def visible_pairs(n_q: int, n_k: int, causal: bool, window: int) -> int:
    """(query, key) pairs a mask keeps: bottom-right causal and, with a window, only the `window` keys ending at
    each query's position (query i at key position i + n_k - n_q)."""
    if not window:
        return causal_pairs(n_q, n_k) if causal else n_q * n_k
    first = n_k - n_q  # key position of the first query: it sees min(p + 1, window) keys at position p
    full_from = max(first, window - 1)  # positions from which a query sees a whole window
    ramp = sum(p + 1 for p in range(first, min(full_from, n_k)))
    return ramp + window * max(0, n_k - full_from)


def _sdpa(causal: bool, backend: str | None) -> Any:
    """SDPA as a user calls it for this problem; `backend` forces one of torch.nn.attention.SDPBackend."""
    def make(problem: Problem) -> Any:
        import torch.nn.functional as F

        d = problem.dims
        gqa = {"enable_gqa": True} if d["heads"] != d["kv_heads"] else {}
        mask: dict[str, Any] = {}
        if causal and d["q_len"] == d["kv_len"]:
            mask = {"is_causal": True}
        elif causal:
            from torch.nn.attention.bias import causal_lower_right

            mask = {"attn_mask": causal_lower_right(d["q_len"], d["kv_len"])}

        def call(q: Any, k: Any, v: Any) -> Any:
            return F.scaled_dot_product_attention(q, k, v, **mask, **gqa)

        if backend is None:
            return call
        from torch.nn.attention import SDPBackend, sdpa_kernel

        chosen = getattr(SDPBackend, backend)

        def forced(q: Any, k: Any, v: Any) -> Any:
            with sdpa_kernel([chosen]):
                return call(q, k, v)

        return forced

    return make


class AttentionOperator(Operator):
    dims = ("batch", "heads", "kv_heads", "q_len", "kv_len", "head_dim")
    example = (1, 32, 8, 4096, 4096, 128)
    dtypes = ("fp16", "bf16")
    entry = "attention"
    throughput_unit = "TFLOP/s"
    torch_schema = "(Tensor q, Tensor k, Tensor v, float? scale=None) -> Tensor"

    def __init__(self, overrides: dict[str, list[Any]] | None = None, causal: bool = False, softcap: float = 0.0,
                 window: int = 0) -> None:
        if softcap < 0 or window < 0 or (window and not causal):
            raise ValueError(f"attention: a cap > 0 and, with a causal mask, a window > 0; got softcap {softcap}, "
                             f"window {window}, causal {causal}")
        self.causal, self.softcap, self.window = causal, float(softcap), int(window)
        self.name = variant_name(causal, self.softcap, self.window)
        super().__init__(overrides)

    def make_family(self, overrides: dict[str, list[Any]] | None) -> GenomeFamily:
        return AttentionFamily(overrides)

    def problem(self, sizes: tuple[int, ...] | list[int], dtype: str) -> Problem:
        p = super().problem(sizes, dtype)
        d = p.dims
        if d["heads"] % d["kv_heads"]:
            raise ValueError(f"{self.name} {p.shape_text}: {d['heads']} query heads are not a multiple of "
                             f"{d['kv_heads']} KV heads")
        if self.causal and d["q_len"] > d["kv_len"]:
            raise ValueError(f"{self.name} {p.shape_text}: a causal mask needs q_len <= kv_len "
                             f"({d['q_len']} > {d['kv_len']})")
        return p

    # -- code generation ----------------------------------------------------------------------------
    def render(self, genome: Genome, problem: Problem, target: Target) -> str:
        reasons = self.family.violations(genome, problem, target)
        if reasons:
            raise InvalidGenome(f"genome {genome} is not valid for {problem.key}: {'; '.join(reasons)}")
        return render_module(self.name, genome.as_dict(), self.causal, problem, target, self.softcap, self.window)

    # -- judging a kernel ---------------------------------------------------------------------------
    def tensor_shapes(self, problem: Problem) -> list[tuple[int, ...]]:
        d = problem.dims
        q = (d["batch"], d["heads"], d["q_len"], d["head_dim"])
        kv = (d["batch"], d["kv_heads"], d["kv_len"], d["head_dim"])
        return [q, kv, kv, q]

    def make_inputs(self, problem: Problem, seed: int, device: str = "cuda") -> tuple[Any, ...]:
        """Standard-normal q, k and v (never zeros), deterministic in `seed`."""
        import torch

        dtype = getattr(torch, DTYPES[problem.dtype])
        shapes = self.tensor_shapes(problem)[:3]
        if torch.device(device).type == "meta":
            return tuple(torch.empty(s, device=device, dtype=dtype) for s in shapes)
        gen = torch.Generator(device=device).manual_seed(seed)
        return tuple(torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes)

    def reference(self, *inputs: Any) -> Any:
        """The formula in fp32, one KV head and a block of queries at a time, so that the scores in flight stay
        near 2**26 values (256 MiB) however long the sequences (32 heads of 16k x 16k at once would be 32 GiB)."""
        import torch

        q, k, v = inputs[:3]
        b, hq, n_q, d = q.shape
        hkv, n_k = k.shape[1], k.shape[2]
        group = hq // hkv
        out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        rows = max(1, REFERENCE_SCORES // (group * n_k))
        for i in range(b):
            for h in range(hkv):
                kf, vf = k[i, h].float(), v[i, h].float()
                for start in range(0, n_q, rows):
                    qf = q[i, h * group:(h + 1) * group, start:start + rows].float()
                    s = qf @ kf.T / math.sqrt(d)
                    if self.softcap:
                        s = self.softcap * torch.tanh(s / self.softcap)
                    if self.causal:
                        pos = torch.arange(start, start + qf.shape[1], device=q.device)[:, None] + (n_k - n_q)
                        keys = torch.arange(n_k, device=q.device)[None, :]
                        hidden = keys > pos
                        if self.window:
                            hidden |= keys <= pos - self.window
                        s = s.masked_fill(hidden, float("-inf"))
                    out[i, h * group:(h + 1) * group, start:start + rows] = torch.softmax(s, dim=-1) @ vf
        return out

    def tolerance(self, problem: Problem) -> float:
        return TOLERANCE[problem.dtype]

    def baselines(self) -> list[Baseline]:
        if self.softcap or self.window:
            return model_baselines(self.causal, self.softcap, self.window)[:1]
        mask = "bottom-right causal mask" if self.causal else "no mask"
        return [Baseline("sdpa", _sdpa(self.causal, None),
                         f"torch.nn.functional.scaled_dot_product_attention, {mask}, the backend PyTorch picks")]

    def bench_baselines(self) -> list[Baseline]:
        if self.softcap or self.window:
            return model_baselines(self.causal, self.softcap, self.window)
        return self.baselines() + [Baseline(name, _sdpa(self.causal, backend), f"SDPA with only {backend} enabled")
                                   for name, backend in _BACKENDS]

    def flops(self, problem: Problem) -> int:
        """4 per (query, key) pair and head dimension (two matrix products), per query head; the causal mask and
        the window count only the pairs they keep."""
        d = problem.dims
        pairs = visible_pairs(d["q_len"], d["kv_len"], self.causal, self.window)
        return 4 * d["batch"] * d["heads"] * pairs * d["head_dim"]

    def bytes(self, problem: Problem) -> int:
        """q and k, v read once, o written once."""
        d = problem.dims
        e = 2
        return e * d["batch"] * d["head_dim"] * (2 * d["heads"] * d["q_len"] + 2 * d["kv_heads"] * d["kv_len"])

    # -- kernels as torch ops -------------------------------------------------------------------------
    def empty_output(self, *args: Any) -> Any:
        import torch

        q = args[0]
        return torch.empty(q.shape, dtype=q.dtype, device=q.device)

    def call_into(self, entry: Any, *args: Any, out: Any) -> Any:
        q, k, v, *scale = args  # the scale comes after `out` in the entry function
        return entry(q, k, v, out=out, scale=scale[0] if scale else None)

    def eager_entry(self, entry: Any) -> Any:
        def attention(q: Any, k: Any, v: Any, scale: float | None = None) -> Any:
            return entry(q, k, v, scale=scale)

        return attention

    def selfcheck_source(self, problem: Problem) -> str:
        """Plain-torch self-check code for exported kernels: the problem's constants (its sizes, the mask, a model's
        cap and window) above operators/attention/selfcheck.py pasted verbatim."""
        d = problem.dims
        head = ["import math", "", "import torch", "",
                f"SELFCHECK_SIZES = {tuple(d[n] for n in self.dims)!r}  # ({', '.join(self.dims)})",
                f"SELFCHECK_DTYPE = torch.{DTYPES[problem.dtype]}", f"SELFCHECK_CAUSAL = {self.causal!r}",
                f"SELFCHECK_SOFTCAP = {self.softcap!r}", f"SELFCHECK_WINDOW = {self.window!r}",
                f"SELFCHECK_TOLERANCE = {self.tolerance(problem)!r}  # largest accepted ||o - ref|| / ||ref||",
                "", ""]
        return "\n".join(head) + pasted_source(SELFCHECK_FILE)


def _number(option: str, prefix: str, kind: type) -> Any:
    """The value of option `prefix<value>` in its canonical spelling; ValueError naming the option otherwise."""
    text = option[len(prefix):]
    try:
        value = kind(text)
    except ValueError:
        value = None
    if kind is float and value is not None and not 0 < value <= MAX_CAP:
        value = None
    canonical = cap_text(value) if kind is float and value is not None else str(value)
    if value is None or not value > 0 or text != canonical:
        example = {"softcap": "softcap50 (Gemma 2's attn_logit_softcapping)",
                   "window": "window4096 (Gemma 2's sliding_window)"}[prefix]
        hint = f" (write it {prefix}{canonical})" if value is not None and value > 0 and text != canonical else ""
        raise ValueError(f"attention option {option!r}: {prefix} takes a positive {kind.__name__} in its name"
                         f"{' up to 1e6' if kind is float else ''}, "
                         f"e.g. {example}{hint}")
    return value


def attention_variant(options: tuple[str, ...], overrides: dict[str, list[Any]] | None) -> AttentionOperator:
    """`attention+causal`, `+softcap<cap>`, `+window<keys>` (causal only), in that order: e.g.
    attention+causal+softcap50+window4096 (Gemma 2's local layers)."""
    causal, softcap, window = False, 0.0, 0
    given = "+".join(("attention",) + options)
    for option in options:
        if option == "causal" and not (causal or softcap or window):
            causal = True
        elif option.startswith("softcap") and not (softcap or window):
            softcap = _number(option, "softcap", float)
        elif option.startswith("window") and not window:
            window = _number(option, "window", int)
        else:
            raise ValueError(f"attention takes the options causal, softcap<cap> and window<keys>, each once and in "
                             f"that order (attention+causal+softcap50+window4096); got {given!r}")
    if window and not causal:
        raise ValueError(f"{given}: a sliding window needs the causal mask (attention+causal+window{window})")
    return AttentionOperator(overrides, causal=causal, softcap=softcap, window=window)
