"""What a compiled kernel uses, read without a GPU: spills from a ptxas log, and a kernel's resources from its
metadata, with the stack frame (cuobjdump on the cubin) judged as spills when it is known."""

from __future__ import annotations

from types import SimpleNamespace

from evo.evaluate import resources
from evo.evaluate.resources import kernel_resources, ptxas_spills

LOG = """ptxas info    : Compiling entry function 'other' for 'sm_90a'
ptxas info    : Function properties for other
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Function properties for matmul_kernel
    96 bytes stack frame, 88 bytes spill stores, 92 bytes spill loads
"""


def kernel(cubin: bytes | None = None) -> SimpleNamespace:
    md = SimpleNamespace(name="matmul_kernel", hash="abc", shared=65536, num_warps=8, num_stages=3)
    return SimpleNamespace(metadata=md, asm={"cubin": cubin} if cubin else {})


def test_ptxas_spills_reads_the_named_function():
    assert ptxas_spills(LOG, "matmul_kernel") == 88
    assert ptxas_spills(LOG, "other") == 0
    assert ptxas_spills(LOG, "missing") is None


def test_without_a_cubin_spills_come_from_the_ptxas_log():
    out = kernel_resources(kernel(), LOG)
    assert out["name"] == "matmul_kernel" and out["hash"] == "abc" and out["shared"] == 65536
    assert out["num_warps"] == 8 and out["num_stages"] == 3
    assert out["registers"] is None and out["spills"] == 88 == out["spill_stores"]


def test_the_stack_frame_is_what_spills_mean_when_cuobjdump_reads_it(monkeypatch):
    usage = {"registers": 168, "stack": 512, "shared": 0, "local": 0}
    monkeypatch.setattr(resources, "cubin_usage", lambda cubin, name: usage)
    out = kernel_resources(kernel(b"\x7fELF"), LOG)
    assert out["registers"] == 168 and out["stack_bytes"] == 512
    assert out["spills"] == 512 and out["spill_stores"] == 88  # judged by the frame; the ptxas count is kept


def test_no_tool_no_usage(monkeypatch):
    resources.cuobjdump_path.cache_clear()
    monkeypatch.setattr(resources, "cuobjdump_path", lambda: None)
    assert resources.cubin_usage(b"\x7fELF", "matmul_kernel") == {}
