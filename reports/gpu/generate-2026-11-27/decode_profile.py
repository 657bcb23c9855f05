"""Where a generate() decode step's time goes, compile way against zoo_compile (python decode_profile.py ZOO CONFIG):
torch.profiler over a generate() of 17 tokens after warm-up; per decode step, the wall time, the GPU's kernel time
(sum of kernel durations) and the host's share, then the top host and GPU entries of each way."""
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from evo.api import load_zoo
from evo.bench.generate import _generator, build_model, hf_config
from evo.zoo.hf_patch import patch_model

zoo, cfg = sys.argv[1], sys.argv[2]
config, name = hf_config(cfg, None)
model = build_model(config, "bf16", "cuda", 0)
ids = torch.randint(3, config.vocab_size, (1, 2048), generator=torch.Generator().manual_seed(0)).cuda()
STEPS = 16
rows = []
for way in ("compile", "zoo_compile"):
    if way == "zoo_compile":
        print(patch_model(model, load_zoo(zoo), quiet=True).line()[:300])
    gen = _generator(model, ids, way, STEPS)
    for _ in range(3):
        gen(STEPS + 1)
    torch.cuda.synchronize()
    t = time.perf_counter(); gen(1); torch.cuda.synchronize(); pre = time.perf_counter() - t
    t = time.perf_counter(); gen(STEPS + 1); torch.cuda.synchronize(); whole = time.perf_counter() - t
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        gen(STEPS + 1)
        torch.cuda.synchronize()
    ev = prof.key_averages()
    gpu_us = sum(e.self_device_time_total for e in ev if e.device_type == torch.autograd.DeviceType.CUDA)
    step_ms = (whole - pre) / STEPS * 1e3
    print(f"\n==== {way}: decode {step_ms:.3f} ms/step (unprofiled); profiled generate: GPU kernel time "
          f"{gpu_us / 1e3:.2f} ms over {STEPS + 1} tokens incl. prefill")
    print(ev.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=60))
    print(ev.table(sort_by="self_device_time_total", row_limit=14, max_name_column_width=60))
    rows.append((way, step_ms, gpu_us / 1e3))
    prof.export_chrome_trace(f"{sys.argv[3]}/trace-{way}.json")
print("\n| way | decode ms/step | GPU kernel ms (profiled generate of 17) |")
for r in rows:
    print(f"| {r[0]} | {r[1]:.3f} | {r[2]:.2f} |")
