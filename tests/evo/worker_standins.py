"""Stand-in child functions for GpuWorker tests without a GPU: each candidate's `fault` gene says what the
stand-in does (return a result, hang, die, raise, or report a lost CUDA context). Top-level functions, so a
spawned child can import them. Their timings are made-up test data."""

from __future__ import annotations

import os
import time
from typing import Any

from evo.supervisor import ExitAfter

GPU = "standin-gpu"
VERSIONS = {"triton": "0", "torch": "0", "cuda": "none"}


def setup(tag: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    info = {"gpu": GPU, "versions": VERSIONS, "worker": f"standin{tag}:pid{os.getpid()}", "pid": os.getpid()}
    return {"info": info}, info


def failing_setup() -> tuple[dict[str, Any], dict[str, Any]]:
    raise RuntimeError("no GPU here (deliberate)")


def handle(state: dict[str, Any], request: Any) -> Any:
    cand = request.prepared.candidate
    fault = cand.genome["fault"]
    common = {"gpu": GPU, "versions": VERSIONS, "worker": state["info"]["worker"]}
    if fault == "hang":
        time.sleep(3600)
    if fault == "launcher_exit":
        os._exit(7)
    if fault == "raise":
        raise RuntimeError("deliberate failure in the handler")
    if fault == "oob":  # what the real child does after an illegal address: reply, then exit
        return ExitAfter(cand.evaluation("crashed", "CUDA error: an illegal memory access was encountered", **common))
    if fault == "wrong":
        return cand.evaluation("wrong", "relative error 1 exceeds the tolerance", max_rel_error=1.0, **common)
    # a made-up timing that identifies the request: the seed, so tests can check no result was swapped
    return cand.evaluation("ok", median_ms=1.0 + request.seed % 1000 / 1e6, spread_ms=0.0, times_ms=[1.0],
                           baseline="standin", baseline_ms=1.0, baseline_spread_ms=0.0, max_rel_error=0.0,
                           resources={"seed": request.seed}, **common)
