"""The cooperative launch's residency cap (evo/launch/runtime.py): programs per SM by CUDA's occupancy rules, the
programs resident on a GPU from a compiled kernel, and the groups a launch may use, with stand-ins for the GPU."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from evo.launch.runtime import cooperative_groups, programs_per_sm, resident_programs

H100 = SimpleNamespace(name="H100", major=9, minor=0, multi_processor_count=132, max_threads_per_multi_processor=2048,
                       regs_per_multiprocessor=65536, shared_memory_per_multiprocessor=233472)


def test_programs_per_sm_follows_each_limit():
    assert programs_per_sm(32, 0, 4, H100) == 16  # threads: 2048 / 128
    assert programs_per_sm(32, 0, 1, H100) == 32  # the hardware's programs per SM
    assert programs_per_sm(128, 0, 8, H100) == 2  # registers: 65536 / (128 * 256)
    assert programs_per_sm(255, 0, 16, H100) == 0  # 255 registers at 512 threads do not fit at all
    assert programs_per_sm(168, 0, 4, H100) == 3  # 168 * 32 = 5376 registers per warp: 12 warps, 3 programs of 4
    assert programs_per_sm(32, 100_000, 4, H100) == 2  # shared memory, with 1 KiB reserved per program
    assert programs_per_sm(32, 115_712, 4, H100) == 2 and programs_per_sm(32, 115_713, 4, H100) == 1
    assert programs_per_sm(0, 0, 8, H100) == programs_per_sm(255, 0, 8, H100)  # unknown registers: the worst
    older = SimpleNamespace(major=8, minor=6, max_threads_per_multi_processor=1536)  # no register/smem fields
    assert programs_per_sm(16, 0, 1, older) == 16


def test_resident_programs_compiles_first_and_counts(monkeypatch):
    import torch

    calls = []

    class Compiled:
        n_regs = 0
        metadata = SimpleNamespace(shared=0, num_warps=8)

        def _init_handles(self):
            self.n_regs = 64

    class Kernel:
        def warmup(self, *args, grid, **options):
            calls.append((args, grid, options))
            return Compiled()

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: H100)
    assert resident_programs(Kernel(), ("x", 3), {"num_warps": 8}, "cuda:0") == 4 * 132  # 64 regs at 8 warps: 4
    assert calls == [(("x", 3), (1,), {"num_warps": 8})]


def test_cooperative_groups():
    assert cooperative_groups(528, 64, 8) == 8  # as many groups as rows when they fit
    assert cooperative_groups(528, 64, 2048) == 8  # else whole groups of the resident programs
    assert cooperative_groups(132, 64, 2048) == 2 and cooperative_groups(64, 64, 3) == 1
    with pytest.raises(ValueError, match="split of 64 programs per row needs them all resident at once; 63 fit"):
        cooperative_groups(63, 64, 8)
