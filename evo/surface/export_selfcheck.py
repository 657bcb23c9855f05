"""The self-check every exported module ends with, and the figures of its header that it compares against.

An exported module stands alone (torch, triton and the standard library), so it cannot call evo's timers: it
carries compact versions of them, the same protocol as the run. GPU time as evo.evaluate.timing takes it (L2
flushed by READING 256 MiB before each run, CUDA events, kernel and baseline interleaved, median); the call
clock as evo.evaluate.clocks.call_ms (back-to-back eager calls, synchronised at the ends of each round, fastest
of rounds) and host µs of one call as clocks.host_us. `_evo_measure()` returns the figures; the self-check prints
them beside the header's ratios and says whether each agrees within 5%, or what differs (GPU model, versions).
"""

from __future__ import annotations

from typing import Any

from evo.store.record import Evaluation

__all__ = ["OBJECTIVE_TEXT", "row_clocks", "selfcheck_constants", "SELFCHECK_MAIN"]

# what the search ranked kernels by (Evaluation.objective), in words
OBJECTIVE_TEXT = {"gpu": "GPU time (CUDA events, L2 flushed)",
              "call": "the call clock (back-to-back eager calls: host launch cost included)"}


def _over(base: float | None, mine: float | None) -> float | None:
    return base / mine if mine and base else None


def row_clocks(ev: Evaluation) -> dict[str, Any]:
    """A row's ratio on each clock (`Evaluation.ratio` is on the run's objective's clock, whichever it is), the
    caller's clocks it carries, and the run's objective. Rows stored before the clocks existed have None there
    (and objective "gpu")."""
    ok = ev.status == "ok"
    return {"gpu_ratio": _over(ev.baseline_ms, ev.median_ms) if ok else None,
            "call_ms": ev.call_ms, "baseline_call_ms": ev.baseline_call_ms,
            "call_ratio": _over(ev.baseline_call_ms, ev.call_ms) if ok else None,
            "host_us": ev.host_us, "baseline_host_us": ev.baseline_host_us, "objective": ev.objective}


def selfcheck_constants(ev: Evaluation, meta: dict[str, Any], smoke: bool) -> dict[str, Any]:
    """The module-level constants SELFCHECK_MAIN reads besides the operator's: the header's figures, where
    they were measured, and the run's timing settings."""
    clocks = row_clocks(ev)
    deciding = meta.get("deciding") if isinstance(meta.get("deciding"), dict) else {}
    return {
        "_EVO_HEADER_GPU_RATIO": None if smoke or not clocks["gpu_ratio"] else round(clocks["gpu_ratio"], 4),
        "_EVO_HEADER_CALL_RATIO": None if smoke or not clocks["call_ratio"] else round(clocks["call_ratio"], 4),
        "_EVO_OBJECTIVE": "smoke" if smoke else clocks["objective"],
        "_EVO_GPU": ev.gpu or "?",
        "_EVO_VERSIONS": {k: str(ev.versions[k]) for k in ("torch", "triton") if k in (ev.versions or {})},
        "_EVO_REPS": int(deciding.get("evaluation.reps") or 30),
        "_EVO_WARMUP": int(deciding.get("evaluation.warmup") or 3),
    }


SELFCHECK_MAIN = '''
import statistics as _evo_statistics
import time as _evo_time

_EVO_FLUSH = {}  # device -> the 256 MiB buffer whose reading evicts L2 (evo's flush)


def _evo_sync(device):
    import torch

    torch.cuda.synchronize(device)


def _evo_gpu_ms(fns, device, reps=_EVO_REPS, warmup=_EVO_WARMUP, budget_ms=400.0):
    """Median GPU ms of each fn as evo times it: runs interleaved (A B A B ...) so drift hits all alike, each
    after L2 is flushed by READING 256 MiB (a memset would leave dirty lines that the timed run pays to write
    back), CUDA events around each run; fewer runs for slow kernels (about budget_ms in all, at least 5)."""
    import torch

    if torch.device(device).type != "cuda":
        raise ValueError(f"GPU time needs a CUDA device, not {device!r}")
    if device not in _EVO_FLUSH:
        _EVO_FLUSH[device] = torch.ones((256 << 20) // 4, dtype=torch.int32, device=device)
    flush = _EVO_FLUSH[device]
    for fn in fns:
        for _ in range(warmup):
            fn()
    _evo_sync(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for fn in fns:
        fn()
    end.record()
    _evo_sync(device)
    per_round = max(start.elapsed_time(end), 1e-3) + 0.05 * len(fns)  # + the flushes
    reps = int(max(min(5, reps), min(reps, budget_ms / per_round)))
    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
              for _ in fns]
    for r in range(reps):
        for fn, evs in zip(fns, events):
            torch.sum(flush, dtype=torch.int64)
            evs[r][0].record()
            fn()
            evs[r][1].record()
    _evo_sync(device)
    return [_evo_statistics.median(s.elapsed_time(e) for s, e in evs) for evs in events]


def _evo_call_ms(fns, device, rounds=7, round_ms=5.0, warmup=3):
    """Per-call ms of back-to-back eager calls (what a Python loop over the op sees: the host's launch cost
    counts wherever it exceeds the GPU's work), synchronised only at the ends of a round of about round_ms;
    the fastest of the rounds (other processes only ever add time), interleaved across fns."""
    counts = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        _evo_sync(device)
        t = _evo_time.perf_counter()
        fn()
        _evo_sync(device)
        one_ms = (_evo_time.perf_counter() - t) * 1e3
        counts.append(int(min(200, max(2, round_ms / one_ms))) if one_ms > 0 else 200)
    per_call = [[] for _ in fns]
    for _ in range(rounds):
        for fn, n, out in zip(fns, counts, per_call):
            _evo_sync(device)
            t = _evo_time.perf_counter()
            for _ in range(n):
                fn()
            _evo_sync(device)
            out.append((_evo_time.perf_counter() - t) * 1e3 / n)
    return [min(p) for p in per_call]


def _evo_host_us(fns, device, reps=9, burst=8, warmup=3, round_ms=5.0):
    """Median host µs of one call of each fn: a burst of calls issued back to back after a synchronisation, timed
    before anything waits for the GPU, over the burst (of fewer calls, two at least, when they take longer than
    round_ms in all)."""
    bursts = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        _evo_sync(device)
        t = _evo_time.perf_counter()
        fn()
        _evo_sync(device)
        one_ms = (_evo_time.perf_counter() - t) * 1e3
        bursts.append(int(min(burst, max(2, round_ms / one_ms))) if one_ms > 0 else burst)
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, n, out in zip(fns, bursts, times):
            _evo_sync(device)
            t = _evo_time.perf_counter()
            for _ in range(n):
                fn()
            out.append((_evo_time.perf_counter() - t) * 1e6 / n)
    _evo_sync(device)
    return [_evo_statistics.median(t) for t in times]


def _evo_measure(device="cuda"):
    """This kernel and its baseline measured here as the run measured them: GPU time, the call clock and host
    µs of one call; ratios are baseline over kernel (> 1: the kernel is faster); header_* are the header's
    ratios (None when it has none)."""
    inputs = selfcheck_inputs(device)
    fns = [lambda: {entry}(*inputs), lambda: selfcheck_baseline(*inputs)]
    gpu = _evo_gpu_ms(fns, device)
    call = _evo_call_ms(fns, device)
    host = _evo_host_us(fns, device)
    return {"gpu_ms": gpu[0], "base_gpu_ms": gpu[1], "gpu_ratio": gpu[1] / gpu[0],
            "call_ms": call[0], "base_call_ms": call[1], "call_ratio": call[1] / call[0],
            "host_us": host[0], "base_host_us": host[1],
            "header_gpu_ratio": _EVO_HEADER_GPU_RATIO, "header_call_ratio": _EVO_HEADER_CALL_RATIO,
            "objective": _EVO_OBJECTIVE}


def _evo_agreement(now, header, here_gpu, here_versions):
    """Whether a ratio measured here agrees with the header's within 5%, or what may explain why not."""
    if header is None:
        return "the header has no such ratio to compare"
    diff = now / header - 1.0
    if abs(diff) <= 0.05:
        return f"agrees with the header's {header:.3f}x within 5% ({diff:+.1%})"
    why = [f"the header was measured on {_EVO_GPU}, this is {here_gpu}"] if here_gpu != _EVO_GPU else []
    # evo records torch's version without its local part ("2.11.0", not "2.11.0+cu130")
    why += [f"{k} {v} there, {here_versions.get(k, '?')} here" for k, v in sorted(_EVO_VERSIONS.items())
            if str(here_versions.get(k)).split("+")[0] != v.split("+")[0]]
    if not why:
        why = ["same GPU model and versions: noise, clock speed or other work on this GPU"]
    return f"differs by {abs(diff):.0%} from the header's {header:.3f}x: " + "; ".join(why)


def _evo_report(m, here_gpu, here_versions):
    """The self-check's lines about speed, from a _evo_measure() result."""
    agree = lambda now, header: _evo_agreement(now, header, here_gpu, here_versions)  # noqa: E731
    chosen = "call clock" if m["objective"] == "call" else "GPU time"
    return [
        f"GPU time (L2 flushed by reading 256 MiB, CUDA events, median, interleaved): kernel {m['gpu_ms']:.4f} ms "
        f"({_EVO_WORK_PER_MS / m['gpu_ms']:.4g} {_EVO_UNIT}), baseline {_EVO_BASELINE} {m['base_gpu_ms']:.4f} ms: "
        f"ratio {m['gpu_ratio']:.3f}x; {agree(m['gpu_ratio'], m['header_gpu_ratio'])}",
        f"call clock (back-to-back eager calls, fastest round): kernel {m['call_ms']:.4f} ms, baseline "
        f"{m['base_call_ms']:.4f} ms: ratio {m['call_ratio']:.3f}x; {agree(m['call_ratio'], m['header_call_ratio'])}",
        f"host time of one call: kernel {m['host_us']:.1f} us, baseline {m['base_host_us']:.1f} us",
        f"objective of the run: {m['objective']}" + ("" if m["objective"] == "smoke" else
                                                     f" (the search ranked kernels by {chosen})"),
    ]


def _evo_selfcheck() -> int:
    """Check the kernel against torch on fresh random inputs; on CUDA also measure it against the baseline."""
    import sys

    import torch
    import triton

    interpret = bool(_evo_os.environ.get("TRITON_INTERPRET"))
    device = "cpu" if interpret or not torch.cuda.is_available() else "cuda"
    if device == "cpu" and _EVO_DTYPE == "bf16":
        print("NOT CHECKED: the Triton CPU interpreter computes bf16 wrongly; run this on a GPU", file=sys.stderr)
        return 77
    inputs = selfcheck_inputs(device)
    sizes = tuple(problem_sizes(*inputs))
    if sizes != _EVO_SIZES:
        print(f"FAIL: self-check inputs have sizes {sizes}, expected {_EVO_SIZES}", file=sys.stderr)
        return 1
    out = {entry}(*inputs)
    ref = selfcheck_reference(*inputs)
    pairs = list(zip(out, ref)) if isinstance(out, tuple) else [(out, ref)]  # an entry may return several tensors
    err = max(((o.float() - r.float()).norm() / r.float().norm().clamp_min(1e-30)).item() for o, r in pairs)
    finite = all(bool(torch.isfinite(o).all()) for o, _ in pairs)
    ok = finite and err <= SELFCHECK_TOLERANCE
    print(f"check {_EVO_PROBLEM} on {device}: relative error {err:.3g} (tolerance {SELFCHECK_TOLERANCE:.3g})"
          f"{'' if finite else ', non-finite values'}: {'PASS' if ok else 'FAIL'}")
    if not ok:
        return 1
    if device == "cuda":
        here = {"torch": str(torch.__version__), "triton": str(triton.__version__)}
        for line in _evo_report(_evo_measure(device), torch.cuda.get_device_name(device), here):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(_evo_selfcheck())
'''
