"""Where a layer call's time goes: torch.profiler over a few calls of a callable, summed per kernel name and bucket.

    summary = profile_calls(fn, calls=5, device="cuda")     # or profile_graph(fn) for its CUDA-graph replay
    {"calls": 5, "kernel_us_per_call": 812.4, "buckets": {"evo": 640.2, "gemm": 0.0, ...},
     "kernels": [{"name": "matmul_kernel", "us": 601.3, "count": 4.0}, ..., {"name": "other", ...}]}

On a GPU the kernels are the device-side events (CUPTI through kineto: kernels, copies, memsets); on the CPU
(`device="cpu"`, the tests) the top-level operators. Times are microseconds per call and counts are per call
(a kernel launched twice a call counts 2.0). The sum of kernel time is what the GPU was busy with; the layer's
call time minus it is the host's launch overhead and the GPU's idle gaps. `classify` puts a kernel name into one of
`BUCKETS`; evo's own kernels are the @triton.jit functions of the zoo module (`evo_kernel_names`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["BUCKETS", "EVO_KERNELS", "classify", "evo_kernel_names", "profile_calls", "profile_graph",
           "bucket_table", "profile_markdown"]

BUCKETS = ("evo", "gemm", "attention", "norm", "elementwise/other")
# The @triton.jit functions evo renders (operators/gemm/launcher.py's KERNEL_NAME, the row-wise operators'
# kernel_name, attention's kernel, the gemm launcher's row copy); a zoo module's own names are added to these.
EVO_KERNELS = frozenset({"matmul_kernel", "rmsnorm_kernel", "softmax_kernel", "attention_kernel", "copy_rows_kernel"})
# Attention before GEMM: cuDNN's and FlashAttention's kernels carry sm90 and cutlass in their names too.
_KEYWORDS = (("attention", ("attention", "flash", "fmha", "sdpa", "cudnn")),
             ("gemm", ("gemm", "matmul", "sm90", "cutlass", "cublas", "nvjet", "mm_", "aten::mm", "aten::addmm",
                       "aten::bmm", "aten::linear")),
             ("norm", ("rms", "norm")))
# Inductor names a kernel after every op it fuses, neighbours included (a RoPE kernel beside attention is
# `triton_poi_fused_..._attention_causal_<hash>_cat_cos_...`): its pointwise kernels are elementwise whatever they
# name, and its fused RMSNorm is a reduction ending in rsqrt (`triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0`).
_INDUCTOR_POINTWISE = "triton_poi_"
_INDUCTOR_NORM = re.compile(r"^triton_(red|per)_.*rsqrt")
TOP_KERNELS = 15
NAME_CHARS = 90
_JIT_DEF = re.compile(r"@triton\.jit\b[^\n]*\n[^\n]*?\bdef (\w+)\(")


def evo_kernel_names(source: str) -> frozenset[str]:
    """The names of the @triton.jit functions in a module's text, also where its kernels' sources are stored as
    quoted lines (a zoo module's `_ZOO_SOURCES`), together with EVO_KERNELS."""
    return EVO_KERNELS | frozenset(_JIT_DEF.findall(source))


def classify(name: str, evo_names: Iterable[str] = EVO_KERNELS) -> str:
    """The bucket of a kernel (or, on the CPU, operator) name: evo's own kernels first (Inductor may suffix a user
    kernel's name with `_0`), then attention, GEMM and norm by keywords, everything else elementwise/other. Eager
    PyTorch's RMSNorm runs as several elementwise and reduction kernels (pow, mean, rsqrt, mul): elementwise/other."""
    names = frozenset(evo_names)
    if name in names or re.sub(r"_\d+$", "", name) in names:
        return "evo"
    if name.startswith(_INDUCTOR_POINTWISE):
        return "elementwise/other"
    lower = name.lower()
    for bucket, words in _KEYWORDS:
        if any(w in lower for w in words):
            return bucket
    return "norm" if _INDUCTOR_NORM.match(name) else "elementwise/other"


def _sync(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.synchronize()


def _events(fn: Callable[[], Any], times: int, cuda: bool) -> list[tuple[str, float]]:
    """(name, microseconds) of each kernel `times` calls of fn ran: device events on a GPU, top-level ops on the CPU."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    _sync(cuda)
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(times):
            fn()
        _sync(cuda)
    if cuda:
        kept = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    else:
        kept = [e for e in prof.events() if e.cpu_parent is None and e.device_type == DeviceType.CPU]
    return [(e.name, float(e.time_range.elapsed_us())) for e in kept]


def _summary(events: list[tuple[str, float]], calls: int, evo_names: Iterable[str]) -> dict[str, Any]:
    if not events:
        raise RuntimeError("the profiler recorded no kernels")
    names = frozenset(evo_names)
    totals: dict[str, list[float]] = {}
    for name, us in events:
        t = totals.setdefault(name, [0.0, 0])
        t[0] += us
        t[1] += 1
    buckets = dict.fromkeys(BUCKETS, 0.0)
    for name, (us, _) in totals.items():
        buckets[classify(name, names)] += us / calls
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])
    kernels = [{"name": name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 3] + "...",
                "us": round(us / calls, 3), "count": round(n / calls, 2)} for name, (us, n) in ranked[:TOP_KERNELS]]
    rest = ranked[TOP_KERNELS:]
    if rest:
        kernels.append({"name": "other", "us": round(sum(us for _, (us, _) in rest) / calls, 3),
                        "count": round(sum(n for _, (_, n) in rest) / calls, 2)})
    return {"calls": calls, "kernel_us_per_call": round(sum(us for _, us in events) / calls, 3),
            "buckets": {b: round(us, 3) for b, us in buckets.items()}, "kernels": kernels}


def profile_calls(fn: Callable[[], Any], *, calls: int = 5, warmup: int = 1, device: str = "cuda",
                  evo_names: Iterable[str] = EVO_KERNELS) -> dict[str, Any]:
    """The kernels of `calls` back-to-back calls of fn (after `warmup` unprofiled ones), per call: the summary of
    the module docstring. RuntimeError when the profiler saw none."""
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    cuda = not str(device).startswith("cpu")
    for _ in range(warmup):
        fn()
    return _summary(_events(fn, calls, cuda), calls, evo_names)


def profile_graph(fn: Callable[[], Any], *, calls: int = 5, warmup: int = 3,
                  evo_names: Iterable[str] = EVO_KERNELS) -> dict[str, Any]:
    """The kernels of one replay of a CUDA graph holding `calls` calls of fn, per call. The capture is
    evo.evaluate.clocks.graph_ms's (warm-up on a side stream, then one graph of all the calls). RuntimeError when
    the profiler saw no kernel in the replay (CUPTI may not trace inside graphs)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()  # the first replay uploads the graph; profile a later one
    try:
        events = _events(graph.replay, 1, cuda=True)
    finally:
        del graph
    if not events:
        raise RuntimeError("the profiler recorded no kernels inside the CUDA graph's replay")
    return _summary(events, calls, evo_names)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _rows(profile: dict[str, dict[str, Any]]) -> list[list[str]]:
    return [[way, _us(p.get("call_us")), _us(p["kernel_us_per_call"])] + [_us(p["buckets"].get(b)) for b in BUCKETS]
            for way, p in profile.items()]


def bucket_table(profile: dict[str, dict[str, Any]]) -> str:
    """A compact text table of one token count's profiles (way x bucket, microseconds per call) for the terminal."""
    head = ["way", "call", "kernels", *(b.split("/")[0] for b in BUCKETS)]
    rows = [head, *_rows(profile)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                     for r in rows)


def profile_markdown(layers: list[dict[str, Any]], device: str = "cuda") -> list[str]:
    """The markdown section of zoo.md on the profiles of `layers` (zoo.json's rows); empty when none has one."""
    profiled = [layer for layer in layers if layer.get("profile") or layer.get("profile_failures")]
    if not profiled:
        return []
    what = ("top-level operators' CPU µs (`--device cpu`)" if device == "cpu" else
            "the summed time of the GPU's kernels (torch.profiler, CUPTI)")
    lines = ["", "## Where the time goes (GPU kernel µs per layer call)", "",
             f"Microseconds per layer call: `call` is the bench's clock (the graph clock for `*_graph`), `kernels` "
             f"{what}; call minus kernels is host and launch overhead plus idle GPU. The eager ways are profiled "
             "through their call path, `*_graph` through a CUDA graph's replay."]
    for layer in profiled:
        lines += ["", f"T={layer['tokens']}:", "",
                  "| way | call µs | kernel µs | " + " | ".join(BUCKETS) + " |", "|" + " --- |" * (3 + len(BUCKETS))]
        lines += ["| " + " | ".join(r) + " |" for r in _rows(layer.get("profile", {}))]
        why = [f"- {way}: {reason}" for way, reason in layer.get("profile_failures", {}).items()]
        lines += ["", "Not profiled:", "", *why] if why else []
    return lines
