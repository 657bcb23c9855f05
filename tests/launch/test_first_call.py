"""The first call of an evo op's argument signature runs off the caller's thread (evo.launch.first_call), so a plan's
workspace is not allocated into a CUDA-graph tree's pool; the GPU side is tests/gpu/test_generate_compile_gpu.py.
Here: CPU tensors run in place, signatures tell plans apart, and the helper thread carries the caller's grad and
inference mode and hands back its result and its errors (CUDA's stream and device pieces stood in for)."""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

from evo.launch import first_call
from evo.launch.first_call import FirstCalls, outside_graph_pools, signature


def test_cpu_tensors_run_in_place_on_the_callers_thread():
    seen: list[str] = []
    calls = FirstCalls()
    x = torch.ones(4)
    assert calls.run(lambda: seen.append(threading.current_thread().name) or 7, (x,)) == 7
    assert seen == [threading.current_thread().name]


def test_signatures_tell_apart_what_a_plan_depends_on():
    x = torch.zeros(8, 4)
    assert signature((x, 1e-6)) == signature((torch.ones(8, 4), 1e-6))
    assert signature((x,)) != signature((torch.zeros(8, 4, dtype=torch.float16),))
    assert signature((x,)) != signature((x.t(),))  # strides
    assert signature((x,)) != signature((torch.zeros(9, 4),))
    assert signature((x.view(-1)[1:],)) != signature((x.view(-1)[:-1],))  # the pointer's 16-byte alignment


@pytest.fixture
def no_cuda_pieces(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synchronized.append(device))


synchronized: list[object] = []


def test_the_helper_thread_carries_the_callers_modes_and_hands_back_results_and_errors(no_cuda_pieces):
    seen: dict[str, object] = {}

    def fn():
        seen.update(thread=threading.current_thread().name, grad=torch.is_grad_enabled(),
                    inference=torch.is_inference_mode_enabled())
        return "done"

    with torch.inference_mode():
        assert outside_graph_pools(fn, torch.device("cpu")) == "done"
    assert seen == {"thread": "evo-first-call", "grad": False, "inference": True}
    assert synchronized[-1] == torch.device("cpu")  # the helper thread binds the device's context before fn
    with torch.no_grad():
        outside_graph_pools(fn, torch.device("cpu"))
    assert seen == {"thread": "evo-first-call", "grad": False, "inference": False}

    def bad():
        raise ValueError("x must be a tensor")

    with pytest.raises(ValueError, match="x must be a tensor"):
        outside_graph_pools(bad, torch.device("cpu"))


def test_only_a_new_signature_goes_to_the_helper_thread(monkeypatch):
    helper: list[tuple] = []
    monkeypatch.setattr(first_call, "outside_graph_pools", lambda fn, device: helper.append(device) or fn())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    calls = FirstCalls()
    x = torch.ones(2, 3)
    assert [calls.run(lambda i=i: i, (x, 0.5)) for i in range(3)] == [0, 1, 2]
    calls.run(lambda: None, (torch.ones(3, 3), 0.5))
    assert len(helper) == 2  # the first call of each of the two signatures
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    calls.run(lambda: None, (torch.ones(4, 3), 0.5))
    assert len(helper) == 2  # under a capture: in place
